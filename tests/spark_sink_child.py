"""A Spark application of its own for tests/test_spark_sink_eos.py: a streaming query copying the pylog topic
``src`` into ``out`` with the exactly-once sink, in a session the test process cannot have (its own JVM, killed
with SIGKILL; Spark's task retries, which the shared ``local[2]`` session does not make).

``python spark_sink_child.py STORE CHECKPOINT SCRATCH MODE``:

- ``retry``: ``local[2,2]`` (a failed task is tried again once); a UDF fails each task's first attempt (a marker
  file per partition under SCRATCH/markers), so every task of every micro-batch runs twice. Runs the query
  with ``availableNow`` to its end.
- ``forever``: ``local[2]``, a processing-time trigger every 200 ms over micro-batches of at most 150 offsets;
  runs until killed (the test SIGKILLs the whole process group at a random moment).
"""

from __future__ import annotations

import os
import sys

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf


def main() -> None:
    store, checkpoint, scratch, mode = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2,2]" if mode == "retry" else "local[2]").appName("pylog-eos-child")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.local.dir", os.path.join(scratch, "local"))
             .config("spark.driver.extraJavaOptions", f"-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={scratch}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    markers = os.path.join(scratch, "markers")
    os.makedirs(markers, exist_ok=True)

    @udf("binary")
    def fail_first_attempt(value: bytes) -> bytes:
        ctx = TaskContext.get()
        marker = os.path.join(markers, f"{ctx.stageId()}-{ctx.partitionId()}")
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("the first attempt of this task fails (tests/spark_sink_child.py)")
        return value

    stream = (spark.readStream.format("pylog").option("subscribe", "src").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "400" if mode == "retry" else "150").load(store))
    if mode == "retry":
        stream = stream.select(fail_first_attempt("value").alias("value"), "key")
    else:
        stream = stream.select("value", "key")
    writer = stream.writeStream.format("pylog").option("topic", "out").option("checkpointLocation", checkpoint)
    if mode == "retry":
        query = writer.trigger(availableNow=True).start(store)
        query.awaitTermination()
        print("batches", len(query.recentProgress), flush=True)
    else:
        query = writer.trigger(processingTime="200 milliseconds").start(store)
        print("started", flush=True)
        query.awaitTermination(600)  # killed long before
    spark.stop()


if __name__ == "__main__":
    main()
