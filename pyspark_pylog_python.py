"""Discovery hook for PySpark: the Python ``pylog`` source under its second name, ``pylog-python``.

Once the JVM reader's jar is loaded, ``format("pylog")`` is the JVM provider (a JVM data source wins the name
over a Python one), which hands writes, streams and the reads it does not handle to this name. Without the jar
``pylog`` (``pyspark_pylog``) and ``pylog-python`` are the same Python source. See ``pyspark_pylog``.
"""

from pylog.spark.source import PylogPythonDataSource as DefaultSource

__all__ = ["DefaultSource"]
