package org.pylog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReader;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import org.pylog.spark.PylogStream.PylogOffset;
import org.pylog.spark.ReadOptions.TopicPartition;

/**
 * {@code trigger(continuous=...)} on the JVM reader, built as Spark's Kafka source builds its continuous stream:
 * one long-running task per pylog partition, each reading from its start offset on and waiting for new records;
 * Spark asks each task for its position at every epoch and merges them ({@link #mergeOffsets}) into the offset
 * it writes to the checkpoint.
 *
 * <p>Invariants: offsets are {@link PylogOffset}'s JSON, the micro-batch stream's, so both read the same
 * checkpoint format; a task's position ({@link Reader#getOffset}) is the offset after the last row it handed to
 * Spark (or its start offset), never an offset it has not passed; a task reads only up to the partition's
 * visible end as the format defines it (docs/FORMAT.md: whole batches whose CRC matches; a batch the writer is
 * still appending ends the visible log), found again at every poll, so it never reads a torn or unfinished batch;
 * offsets removed under the query are data loss ({@code failOnDataLoss}), as in the micro-batch stream; a
 * partition created while the query runs makes Spark restart the run ({@link #needsReconfiguration}) and is read
 * from its log start. Transactions: only {@code read_uncommitted} (the default) runs here; a stream at
 * {@code read_committed} is the Python source's, which has no continuous mode ({@link PylogTable}).
 */
final class PylogContinuous implements ContinuousStream {
    /** How long a task waits before it looks for new records again when it has read all visible ones. */
    static final long POLL_MS = 100;

    private final ReadOptions options;
    private final StructType schema;
    private volatile Set<TopicPartition> known;

    PylogContinuous(ReadOptions options, StructType schema) {
        this.options = options;
        this.schema = schema;
    }

    @Override
    public Offset initialOffset() {
        return PylogStream.startingOffsets(options);
    }

    @Override
    public Offset deserializeOffset(String json) {
        return PylogOffset.parse(json);
    }

    /** One task per subscribed partition, from its offset in {@code start}; a new partition from its log start. */
    @Override
    public InputPartition[] planInputPartitions(Offset start) {
        Map<TopicPartition, Long> from = ((PylogOffset) start).positions;
        try {
            List<TopicPartition> now = Planner.partitions(options);
            Set<TopicPartition> gone = new TreeSet<>(from.keySet());
            gone.removeAll(now);
            if (!gone.isEmpty()) DataLoss.report(options.failOnDataLoss, "partitions " + gone + " are gone");
            InputPartition[] out = new InputPartition[now.size()];
            for (int i = 0; i < out.length; i++) {
                TopicPartition tp = now.get(i);
                Long at = from.get(tp);
                long begin = at != null ? at : Planner.open(options, tp).logStartOffset();
                out[i] = new Task(options.path, tp.topic(), tp.partition(), begin, options.failOnDataLoss);
            }
            known = new TreeSet<>(now);
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A partition created (or deleted) since the tasks were planned: Spark restarts them from the last epoch. */
    @Override
    public boolean needsReconfiguration() {
        try {
            return known != null && !known.equals(new TreeSet<>(Planner.partitions(options)));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public ContinuousPartitionReaderFactory createContinuousReaderFactory() {
        return new Factory(schema);
    }

    @Override
    public Offset mergeOffsets(PartitionOffset[] offsets) {
        Map<TopicPartition, Long> merged = new TreeMap<>();
        for (PartitionOffset o : offsets) {
            Position p = (Position) o;
            merged.put(p.partition, p.next);
        }
        return new PylogOffset(merged);
    }

    @Override
    public void commit(Offset end) {
        // progress lives in Spark's checkpoint; a pylog log keeps no reader state
    }

    @Override
    public void stop() {
    }

    /** A task's position: the next offset of its partition it will read. */
    record Position(TopicPartition partition, long next) implements PartitionOffset {
    }

    /** One partition of a continuous query, read from {@code from} on, for as long as the query runs. */
    static final class Task implements InputPartition {
        private static final long serialVersionUID = 1L;
        final String store;
        final String topic;
        final int partition;
        final long from;
        final boolean failOnDataLoss;

        Task(String store, String topic, int partition, long from, boolean failOnDataLoss) {
            this.store = store;
            this.topic = topic;
            this.partition = partition;
            this.from = from;
            this.failOnDataLoss = failOnDataLoss;
        }
    }

    private static final class Factory implements ContinuousPartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final StructType schema;

        Factory(StructType schema) {
            this.schema = schema;
        }

        @Override
        public ContinuousPartitionReader<InternalRow> createReader(InputPartition partition) {
            return new Reader((Task) partition, schema);
        }
    }

    /**
     * A task's reader: the visible records from its position on, through {@link ColumnarReader} over
     * {@code [next, visible end)} (CRC checks, control batches, gaps and data loss as in batch reads), then a
     * poll every {@link #POLL_MS} ms for a visible end past it. Spark calls {@link #next}, {@link #get} and
     * {@link #getOffset} from one thread, and ends the task by interrupting it.
     */
    static final class Reader implements ContinuousPartitionReader<InternalRow> {
        private final Task task;
        private final StructType schema;
        private final TopicPartition tp;
        private final Path dir;
        private final UnsafeProjection toRow;
        private ColumnarReader chunk;   // the read of [next, chunkEnd), or null between polls
        private long chunkEnd;
        private ColumnarBatch batch;
        private int row;                // the next row of batch
        private long next;              // the offset after the last row returned (or the start)
        private InternalRow current;
        private long reportedEnd = -1;  // the short log end already reported (warned once, not every poll)

        Reader(Task task, StructType schema) {
            this.task = task;
            this.schema = schema;
            this.tp = new TopicPartition(task.topic, task.partition);
            this.dir = Paths.get(task.store, task.topic, Integer.toString(task.partition));
            this.toRow = UnsafeProjection.create(schema);
            this.next = task.from;
        }

        /** The next record; blocks until there is one, or returns false once the task is ending. */
        @Override
        public boolean next() throws IOException {
            while (true) {
                if (batch != null && row < batch.numRows()) {
                    current = toRow.apply(batch.getRow(row));
                    next = chunk.offsetOf(row) + 1;
                    row++;
                    return true;
                }
                batch = null;
                if (chunk != null) {
                    if (chunk.next()) {
                        batch = chunk.get();
                        row = 0;
                        continue;
                    }
                    chunk.close();
                    chunk = null;
                    next = Math.max(next, chunkEnd); // markers, aborted or compacted offsets at the end: passed
                }
                TaskContext context = TaskContext.get();
                if (context != null && (context.isInterrupted() || context.isCompleted())) return false;
                long end = PartitionLog.open(dir).logEndOffset();
                if (end > next) {
                    chunkEnd = end;
                    chunk = new ColumnarReader(new PylogInputPartition(task.store, task.topic, task.partition, next, end,
                            task.failOnDataLoss), schema);
                    continue;
                }
                if (end < next && end != reportedEnd) {
                    // as the micro-batch stream: never moves backwards; without failOnDataLoss, waits for the log
                    // to grow past what was read
                    reportedEnd = end;
                    DataLoss.report(task.failOnDataLoss, tp + ": the log ends at " + end + ", before offset " + next
                            + " already read (truncated or recreated)");
                }
                try {
                    Thread.sleep(POLL_MS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
        }

        @Override
        public InternalRow get() {
            return current;
        }

        @Override
        public PartitionOffset getOffset() {
            return new Position(tp, next);
        }

        @Override
        public void close() {
            if (chunk != null) chunk.close();
        }
    }
}
