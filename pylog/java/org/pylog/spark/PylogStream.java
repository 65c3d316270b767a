package org.pylog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

import org.pylog.spark.ReadOptions.TopicPartition;

/**
 * Micro-batch streams on the JVM, as pylog/spark/stream.py (the reference) reads them: offsets are the Kafka
 * source's JSON {@code {"topic": {"0": next offset}}}, the same layout as the Python source's, so a checkpoint
 * written by either is read by the other.
 *
 * <p>Invariants (those of stream.py): Spark's checkpoint is the only record of progress ({@link #commit} does
 * nothing); {@link #latestOffset} never moves a partition backwards and, under {@code maxOffsetsPerTrigger},
 * advances at most that many offsets in total, shared by backlog (largest remainders); a partition that appears
 * while the query runs is read from its log start; with {@code availableNow} the ends are frozen at the log ends
 * seen by {@link #prepareForTriggerAvailableNow}; offsets removed under the query are data loss (an error with
 * {@code failOnDataLoss=true}, else skipped with a warning). Beyond the Python source: query progress carries
 * the Kafka source's {@code minOffsetsBehindLatest}, {@code maxOffsetsBehindLatest} and
 * {@code avgOffsetsBehindLatest} ({@link #metrics}). Under {@code kafka.isolation.level=read_committed} the end
 * a partition is read to is its last stable offset (a start past it waits there, it is no data loss), and
 * the tasks skip aborted transactions' records ({@link Transactions}; the driver keeps one LSO tracker per
 * partition, so a trigger replays only the batch headers appended since the last).
 */
final class PylogStream implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final ReadOptions options;
    private final StructType schema;
    private Map<TopicPartition, Long> target;   // availableNow: the ends to stop at
    private Map<TopicPartition, Long> latestSeen = new HashMap<>();
    private long lastTriggerMs = -1;   // when the last micro-batch was let through (minOffsetsPerTrigger)
    private final Map<TopicPartition, Transactions.Tracker> trackers = new HashMap<>();   // read_committed

    PylogStream(ReadOptions options, StructType schema) {
        this.options = options;
        this.schema = schema;
    }

    /** The stream of a scan's options (checked as a stream's) and table schema. */
    static PylogStream of(Map<String, String> options, StructType schema) {
        ReadOptions parsed = ReadOptions.parse(options, true);
        Schemas.checkDeclared(schema, parsed.includeHeaders);
        return new PylogStream(parsed, schema);
    }

    /** An offset: the Kafka source's JSON, partitions sorted. */
    static final class PylogOffset extends Offset {
        final Map<TopicPartition, Long> positions;

        PylogOffset(Map<TopicPartition, Long> positions) {
            this.positions = new TreeMap<>(positions);
        }

        @Override
        public String json() {
            ObjectNode doc = JSON.createObjectNode();
            for (Map.Entry<TopicPartition, Long> e : positions.entrySet()) {
                ObjectNode parts = doc.has(e.getKey().topic()) ? (ObjectNode) doc.get(e.getKey().topic())
                        : doc.putObject(e.getKey().topic());
                parts.put(Integer.toString(e.getKey().partition()), e.getValue());
            }
            return doc.toString();
        }

        static PylogOffset parse(String json) {
            Map<TopicPartition, Long> out = new TreeMap<>();
            try {
                JsonNode doc = JSON.readTree(json);
                for (var t = doc.fields(); t.hasNext(); ) {
                    var topic = t.next();
                    for (var p = topic.getValue().fields(); p.hasNext(); ) {
                        var part = p.next();
                        out.put(new TopicPartition(topic.getKey(), Integer.parseInt(part.getKey())), part.getValue().asLong());
                    }
                }
            } catch (IOException | RuntimeException e) {
                throw new IllegalArgumentException("not a pylog stream offset: " + json, e);
            }
            return new PylogOffset(out);
        }
    }

    /** {@code {log start, end to read to, visible end}} of every subscribed partition now; the end to read to
     *  is the last stable offset under read_committed, else the visible end. */
    private Map<TopicPartition, long[]> snapshot() {
        try {
            Map<TopicPartition, long[]> out = new TreeMap<>();
            for (TopicPartition tp : Planner.partitions(options)) {
                PartitionLog log = Planner.open(options, tp);
                long end = log.logEndOffset();
                long stable = options.committed
                        ? trackers.computeIfAbsent(tp, k -> new Transactions.Tracker()).lastStableOffset(log, end) : end;
                out.put(tp, new long[] {log.logStartOffset(), stable, end});
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private void loss(String message) {
        DataLoss.report(options.failOnDataLoss, message);
    }

    @Override
    public Offset initialOffset() {
        return startingOffsets(options);
    }

    /** Where a new query starts ({@code startingOffsets} and the timestamp options, resolved now): offsets
     *  already removed or past the log end are data loss. The continuous stream starts there too. */
    static PylogOffset startingOffsets(ReadOptions options) {
        try {
            List<TopicPartition> parts = Planner.partitions(options);
            Planner.checkNamed(options.starting, parts);
            Map<TopicPartition, Long> offsets = new TreeMap<>();
            for (TopicPartition tp : parts) {
                PartitionLog log = Planner.open(options, tp);
                long end = log.logEndOffset();
                long start = log.logStartOffset();
                long stable = options.committed ? new Transactions.Tracker().lastStableOffset(log, end) : end;
                long off = Planner.resolve(options.starting, tp, start, stable, log, options.startingByTimestampStrategy);
                if (off < start) {
                    DataLoss.report(options.failOnDataLoss, tp + ": offsets [" + off + ", " + start
                            + ") were removed before the query started (the log now starts at " + start + ")");
                    off = start;
                } else if (off > end) {
                    DataLoss.report(options.failOnDataLoss, tp + ": starting offset " + off + " is beyond the log end "
                            + end);
                    off = end;
                }
                offsets.put(tp, off);
            }
            return new PylogOffset(offsets);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public Offset deserializeOffset(String json) {
        return PylogOffset.parse(json);
    }

    /** Kafka's: {@code maxOffsetsPerTrigger} as max rows, {@code minOffsetsPerTrigger} (with
     *  {@code maxTriggerDelay}) as min rows, both as a composite limit. */
    @Override
    public ReadLimit getDefaultReadLimit() {
        ReadLimit max = options.maxOffsetsPerTrigger != null ? ReadLimit.maxRows(options.maxOffsetsPerTrigger) : null;
        ReadLimit min = options.minOffsetsPerTrigger != null
                ? ReadLimit.minRows(options.minOffsetsPerTrigger, options.maxTriggerDelayMs) : null;
        if (min != null && max != null) return ReadLimit.compositeLimit(new ReadLimit[] {min, max});
        return min != null ? min : max != null ? max : ReadLimit.allAvailable();
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = new HashMap<>();
        snapshot().forEach((tp, se) -> target.put(tp, se[1]));   // the LSO under read_committed
    }

    @Override
    public Offset reportLatestOffset() {
        Map<TopicPartition, Long> ends = new TreeMap<>();
        snapshot().forEach((tp, se) -> ends.put(tp, se[1]));
        return new PylogOffset(ends);
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the one Spark calls");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        Map<TopicPartition, Long> start = ((PylogOffset) startOffset).positions;
        Map<TopicPartition, Long> begin = new TreeMap<>(start);
        Map<TopicPartition, Long> end = new TreeMap<>();
        Map<TopicPartition, Long> latest = new HashMap<>();
        for (Map.Entry<TopicPartition, long[]> e : snapshot().entrySet()) {
            TopicPartition tp = e.getKey();
            long logStart = e.getValue()[0];
            long stable = e.getValue()[1];
            long logEnd = e.getValue()[2];
            latest.put(tp, stable);
            if (target != null) {
                if (!target.containsKey(tp)) continue; // appeared after the availableNow run started: next run
                stable = Math.min(stable, target.get(tp));
            }
            Long b = begin.get(tp);
            if (b == null) {   // a new partition: from its earliest offset
                b = logStart;
                begin.put(tp, b);
            } else if (logEnd < b) {
                loss(tp + ": the log ends at " + logEnd + ", before offset " + b + " already read (truncated or recreated)");
            }
            end.put(tp, Math.max(stable, b));   // never backwards (read_committed: a start past the LSO waits there)
        }
        latestSeen = latest;
        ReadLimit[] limits = limit instanceof CompositeReadLimit c ? c.getReadLimits() : new ReadLimit[] {limit};
        long now = System.currentTimeMillis();
        if (lastTriggerMs < 0) lastTriggerMs = now;
        for (ReadLimit l : limits) {
            // Kafka's rule: hold the micro-batch back while fewer than minRows offsets wait and the last one
            // ran less than maxTriggerDelay ago (availableNow reads what is there, as Kafka's does)
            if (l instanceof ReadMinRows min && target == null) {
                long waiting = 0;
                for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                    waiting += Math.max(0, e.getValue() - begin.getOrDefault(e.getKey(), e.getValue()));
                }
                if (waiting < min.minRows() && now - lastTriggerMs < min.maxTriggerDelayMs()) return startOffset;
            }
        }
        lastTriggerMs = now;
        for (ReadLimit l : limits) {
            if (l instanceof ReadMaxRows max) end = prorate(begin, end, max.maxRows());
        }
        for (Map.Entry<TopicPartition, Long> e : start.entrySet()) end.putIfAbsent(e.getKey(), e.getValue());
        return new PylogOffset(end);
    }

    /** Ends that advance at most {@code limit} offsets in total past {@code begin}, shared by backlog
     *  (stream.py's prorate: floor shares, the leftover to the largest remainders, ties by partition). */
    static Map<TopicPartition, Long> prorate(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> end, long limit) {
        Map<TopicPartition, Long> backlog = new TreeMap<>();
        long total = 0;
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            long b = Math.max(0, e.getValue() - begin.getOrDefault(e.getKey(), e.getValue()));
            backlog.put(e.getKey(), b);
            total += b;
        }
        if (total <= limit) return new TreeMap<>(end);
        Map<TopicPartition, Long> share = new TreeMap<>();
        long left = limit;
        List<TopicPartition> order = new ArrayList<>(backlog.keySet());
        Map<TopicPartition, Long> remainder = new HashMap<>();
        for (TopicPartition tp : order) {
            java.math.BigInteger prod = java.math.BigInteger.valueOf(limit).multiply(java.math.BigInteger.valueOf(backlog.get(tp)));
            java.math.BigInteger[] qr = prod.divideAndRemainder(java.math.BigInteger.valueOf(total));
            share.put(tp, qr[0].longValue());
            remainder.put(tp, qr[1].longValue());
            left -= qr[0].longValue();
        }
        order.sort((x, y) -> {
            int c = Long.compare(remainder.get(y), remainder.get(x));
            return c != 0 ? c : x.compareTo(y);
        });
        for (TopicPartition tp : order) {
            if (left <= 0) break;
            if (share.get(tp) < backlog.get(tp)) {
                share.put(tp, share.get(tp) + 1);
                left--;
            }
        }
        Map<TopicPartition, Long> out = new TreeMap<>();
        for (TopicPartition tp : end.keySet()) out.put(tp, begin.getOrDefault(tp, end.get(tp)) + share.get(tp));
        return out;
    }

    @Override
    public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
        Map<TopicPartition, Long> begin = ((PylogOffset) startOffset).positions;
        Map<TopicPartition, Long> stop = ((PylogOffset) endOffset).positions;
        if (stop.isEmpty() || begin.equals(stop)) return new InputPartition[0];
        Map<TopicPartition, long[]> snap = snapshot();
        List<PylogInputPartition> ranges = new ArrayList<>();
        for (Map.Entry<TopicPartition, Long> e : stop.entrySet()) {
            TopicPartition tp = e.getKey();
            long end = e.getValue();
            long[] se = snap.get(tp);
            if (se == null) {
                if (end > begin.getOrDefault(tp, end)) loss(tp + ": the partition is gone");
                continue;
            }
            long b = begin.getOrDefault(tp, se[0]);
            if (b < se[0]) {
                loss(tp + ": offsets [" + b + ", " + Math.min(end, se[0]) + ") were removed before they were read (the log "
                        + "now starts at " + se[0] + ")");
                b = Math.min(se[0], end);
            }
            if (b < end) ranges.add(new PylogInputPartition(options.path, tp.topic(), tp.partition(), b, end,
                    options.failOnDataLoss, options.committed));
        }
        return Planner.split(ranges, options.minPartitions, options.maxRecordsPerPartition).toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new PylogReaderFactory(schema);
    }

    /** The Kafka source's lag metrics: offsets between what the last micro-batch read and the latest seen. */
    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
        Map<String, String> out = new LinkedHashMap<>();
        if (latestConsumedOffset.isEmpty() || latestSeen.isEmpty()) return out;
        Map<TopicPartition, Long> consumed = ((PylogOffset) latestConsumedOffset.get()).positions;
        long min = Long.MAX_VALUE;
        long max = 0;
        long sum = 0;
        int n = 0;
        for (Map.Entry<TopicPartition, Long> e : latestSeen.entrySet()) {
            Long at = consumed.get(e.getKey());
            long behind = Math.max(0, e.getValue() - (at == null ? 0 : at));
            min = Math.min(min, behind);
            max = Math.max(max, behind);
            sum += behind;
            n++;
        }
        out.put("minOffsetsBehindLatest", Long.toString(min));
        out.put("maxOffsetsBehindLatest", Long.toString(max));
        out.put("avgOffsetsBehindLatest", Double.toString((double) sum / n));
        return out;
    }

    @Override
    public void commit(Offset end) {
        // progress lives in Spark's checkpoint; a pylog log keeps no reader state
    }

    @Override
    public void stop() {
    }
}
