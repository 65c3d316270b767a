package org.pylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task's share of a read: offsets {@code [from, until)} of one partition of one topic. */
final class PylogInputPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String store;
    final String topic;
    final int partition;
    final long from;
    final long until;

    PylogInputPartition(String store, String topic, int partition, long from, long until) {
        this.store = store;
        this.topic = topic;
        this.partition = partition;
        this.from = from;
        this.until = until;
    }

    long size() {
        return until - from;
    }
}
