package org.pylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task's share of a read: offsets {@code [from, until)} of one partition of one topic, and what to do when
 *  some of them are gone by the time the task reads them ({@code failOnDataLoss}). */
final class PylogInputPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String store;
    final String topic;
    final int partition;
    final long from;
    final long until;
    final boolean failOnDataLoss;

    PylogInputPartition(String store, String topic, int partition, long from, long until, boolean failOnDataLoss) {
        this.store = store;
        this.topic = topic;
        this.partition = partition;
        this.from = from;
        this.until = until;
        this.failOnDataLoss = failOnDataLoss;
    }

    long size() {
        return until - from;
    }
}
