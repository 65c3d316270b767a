package org.pylog.spark;

/**
 * The messages of the errors this reader raises lead with the class of the error the Python reader raises for
 * the same failure, as {@code pylog.errors.InvalidOptionError: option 'x': ...}: the form of a Python
 * traceback's last line, which is also what Spark shows for the Python source's errors when it hides Python
 * tracebacks. So one rule finds pylog's error in whatever Spark wraps it in, whichever reader ran
 * ({@code pylog.spark.pylog_error}, docs/SPARK.md, "Errors").
 */
final class Errors {
    private Errors() {
    }

    /** {@code message} led by {@code pylog.errors.<pythonClass>: }. */
    static String lead(String pythonClass, String message) {
        return "pylog.errors." + pythonClass + ": " + message;
    }
}
