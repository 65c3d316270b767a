package org.pylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Several offset ranges read by one task, one after the other in this order: small ranges that pushed filters
 *  cut ({@link Planner#pack}), or every range of a {@code count(*)} ({@link CountScan}). */
record RangeGroup(PylogInputPartition[] ranges) implements InputPartition {
}
