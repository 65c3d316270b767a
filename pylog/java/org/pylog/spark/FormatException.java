package org.pylog.spark;

import java.io.IOException;

/** A file of a pylog store breaks docs/FORMAT.md: the message names the file and the byte position (led by the
 *  Python reader's class for it, {@link Errors}). */
public final class FormatException extends IOException {
    private static final long serialVersionUID = 1L;

    public FormatException(String message) {
        super(Errors.lead("CorruptRecordError", message));
    }
}
