"""Discovery hook for PySpark: ``spark.read.format("pylog")`` with no register call.

PySpark (4.0+) imports every top-level module whose name starts with ``pyspark_`` and registers the
``DefaultSource`` it finds there under ``DefaultSource.name()`` ("pylog"). The lookup runs in a Python
worker (``PYSPARK_PYTHON``), so this module must be importable there: a normal install, or an editable
one that puts the project directory on ``sys.path`` (see ``package_dir`` in setup.cfg).
"""

from pylog.spark.source import PylogDataSource as DefaultSource

__all__ = ["DefaultSource"]
