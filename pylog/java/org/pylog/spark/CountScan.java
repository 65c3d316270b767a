package org.pylog.spark;

import java.io.IOException;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.Literal;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.Count;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.expressions.aggregate.Sum;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * {@code count(*)} (also {@code count(<literal>)}, and {@code sum(<integer literal>)}, which Spark's optimizer
 * makes of {@code groupBy(c).count().agg(sum("count"))}: the row count times the literal, null over no row)
 * answered by the scan (Spark's aggregate pushdown, complete: no aggregate runs after it):
 * one task walks every planned range with a {@link ColumnarReader} of no column (the ranges on as many threads
 * as the machine has cores, up to one each: every batch's CRC is checked), so records are counted from
 * batch headers where a batch lies wholly inside a range (decoded only where it straddles a range's end or has
 * offset gaps: a compacted topic), control batches count nothing, and data loss is reported as in any read.
 *
 * <p>Invariants: pushed only with no GROUP BY, every aggregate one of those above, and (Spark's own rule) every
 * filter applied exactly by the planned ranges; the answer is then the row count the plain scan would give.
 */
final class CountScan implements Scan, Batch {
    private final StructType schema;
    private final ReadOptions options;
    private final RangeFilter pushed;
    /** Per aggregate: null for a count, else the literal a sum adds per row. */
    private final Long[] sums;
    /** The input partition of the first {@link #planInputPartitions} call. */
    private InputPartition[] planned;

    /** {@code aggregation} is one this scan answers: no grouping, only counts and sums of integer literals. */
    static boolean answers(Aggregation aggregation) {
        if (aggregation.groupByExpressions().length != 0) return false;
        for (AggregateFunc f : aggregation.aggregateExpressions()) {
            if (!(f instanceof CountStar) && summand(f) == null && !(f instanceof Count c && !c.isDistinct()
                    && c.column() instanceof Literal<?> l && l.value() != null)) {
                return false;
            }
        }
        return aggregation.aggregateExpressions().length > 0;
    }

    /** The integer literal {@code f} sums ({@code sum(1)}), or null when {@code f} is no such sum. */
    private static Long summand(AggregateFunc f) {
        if (f instanceof Sum s && !s.isDistinct() && s.column() instanceof Literal<?> l) {
            Object v = l.value();
            if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
                return ((Number) v).longValue();
            }
        }
        return null;
    }

    CountScan(Aggregation aggregation, ReadOptions options, RangeFilter pushed) {
        StructType s = new StructType();
        AggregateFunc[] fs = aggregation.aggregateExpressions();
        sums = new Long[fs.length];
        for (int i = 0; i < fs.length; i++) {
            sums[i] = summand(fs[i]);
            s = sums[i] == null ? s.add("count" + i, DataTypes.LongType, false) : s.add("sum" + i, DataTypes.LongType, true);
        }
        this.schema = s;
        this.options = options;
        this.pushed = pushed;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public String description() {
        return "pylog (JVM reader) count(*) from batch headers " + options.path;
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public synchronized InputPartition[] planInputPartitions() {
        if (planned == null) {   // Spark asks twice per query (PylogTable's scan says why): planned once
            List<PylogInputPartition> ranges = Planner.plan(options, pushed);
            planned = new InputPartition[] {new RangeGroup(ranges.toArray(new PylogInputPartition[0]))};
        }
        return planned.clone();
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new Factory(sums);
    }

    private record Factory(Long[] sums) implements PartitionReaderFactory {
        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new Counter(((RangeGroup) partition).ranges(), sums);
        }
    }

    private static final class Counter implements PartitionReader<InternalRow> {
        private static final StructType NO_COLUMNS = new StructType();
        private final PylogInputPartition[] ranges;
        private final Long[] sums;
        private boolean done;

        Counter(PylogInputPartition[] ranges, Long[] sums) {
            this.ranges = ranges;
            this.sums = sums;
        }

        @Override
        public boolean next() {
            return !done;
        }

        @Override
        public InternalRow get() {
            done = true;
            long total = 0;
            int threads = Math.min(ranges.length, Runtime.getRuntime().availableProcessors());
            if (threads <= 1) {
                for (PylogInputPartition r : ranges) total += count(r);
            } else {
                // The count's one task checks every batch's CRC (the log's every byte); the ranges' checks are
                // independent, so they run on the machine's cores instead of one, as a scan's tasks would
                // (the count stays one task: no exchange, no second job, which is what answering it here buys).
                java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads,
                        r -> {
                            Thread t = new Thread(r, "pylog-count");
                            t.setDaemon(true);
                            return t;
                        });
                try {
                    List<java.util.concurrent.Future<Long>> parts = new java.util.ArrayList<>();
                    for (PylogInputPartition r : ranges) parts.add(pool.submit(() -> count(r)));
                    for (java.util.concurrent.Future<Long> f : parts) total += await(f);
                } finally {
                    pool.shutdownNow();
                }
            }
            Object[] values = new Object[sums.length];
            for (int i = 0; i < sums.length; i++) {
                // a sum over no row is null; one past a long's range fails, as Spark's sum does under ANSI mode
                values[i] = sums[i] == null ? (Object) total : total == 0 ? null : (Object) Math.multiplyExact(total, sums[i]);
            }
            return new GenericInternalRow(values);
        }

        /** The records of range {@code r} a read returns (data loss and damage raise as in a read). */
        private static long count(PylogInputPartition r) {
            long n = 0;
            ColumnarReader reader = new ColumnarReader(r, NO_COLUMNS);
            try {
                while (reader.next()) n += reader.get().numRows();
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            } finally {
                reader.close();
            }
            return n;
        }

        /** {@code f}'s count; its failure rethrown as the range's read raised it (the same messages). */
        private static long await(java.util.concurrent.Future<Long> f) {
            try {
                return f.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("pylog: count(*) interrupted", e);
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof RuntimeException re) throw re;
                if (cause instanceof Error err) throw err;
                throw new IllegalStateException(cause);
            }
        }

        @Override
        public void close() {
        }
    }
}
