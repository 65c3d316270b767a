package org.pylog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task's share of a read: offsets {@code [from, until)} of one partition of one topic, what to do when
 *  some of them are gone by the time the task reads them ({@code failOnDataLoss}), and whether records of
 *  aborted transactions are skipped ({@code committed}: read_committed, whose ranges end at most at the LSO). */
final class PylogInputPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String store;
    final String topic;
    final int partition;
    final long from;
    final long until;
    final boolean failOnDataLoss;
    final boolean committed;

    PylogInputPartition(String store, String topic, int partition, long from, long until, boolean failOnDataLoss) {
        this(store, topic, partition, from, until, failOnDataLoss, false);
    }

    PylogInputPartition(String store, String topic, int partition, long from, long until, boolean failOnDataLoss,
                        boolean committed) {
        this.store = store;
        this.topic = topic;
        this.partition = partition;
        this.from = from;
        this.until = until;
        this.failOnDataLoss = failOnDataLoss;
        this.committed = committed;
    }

    long size() {
        return until - from;
    }
}
