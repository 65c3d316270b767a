package org.pylog.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.connector.read.InputPartition;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * A batch query's plan: the offset range of every partition it reads, resolved as pylog/spark/reader.py's
 * {@code plan_ranges} does, then split as its {@code split_ranges} does (the Kafka source's rule); the small
 * ranges a filter leaves are packed into fewer tasks ({@link #pack}).
 */
final class Planner {
    private static final ObjectMapper JSON = new ObjectMapper();

    private Planner() {
    }

    /** Topics of the store (directories holding a topic.json), sorted. */
    static List<String> topics(Path store) throws IOException {
        List<String> out = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(store)) {
            for (Path p : ds) {
                if (Files.isRegularFile(p.resolve("topic.json"))) out.add(p.getFileName().toString());
            }
        }
        out.sort(null);
        return out;
    }

    static int partitionCount(Path store, String topic) throws IOException {
        JsonNode doc = JSON.readTree(store.resolve(topic).resolve("topic.json").toFile());
        JsonNode n = doc.get("partitions");
        if (n == null || !n.canConvertToInt() || n.asInt() < 1) {
            throw new FormatException(store.resolve(topic).resolve("topic.json") + ": no partition count");
        }
        return n.asInt();
    }

    static PartitionLog open(ReadOptions o, ReadOptions.TopicPartition tp) throws IOException {
        return PartitionLog.open(Paths.get(o.path).resolve(tp.topic()).resolve(Integer.toString(tp.partition())));
    }

    static List<ReadOptions.TopicPartition> partitions(ReadOptions o) throws IOException {
        Path store = Paths.get(o.path);
        List<ReadOptions.TopicPartition> out = new ArrayList<>();
        if (o.subscribeKind.equals("assign")) {
            for (ReadOptions.TopicPartition tp : o.assigned) {
                if (!Files.isRegularFile(store.resolve(tp.topic()).resolve("topic.json"))) {
                    throw ReadOptions.bad("assign", "topic '" + tp.topic() + "' does not exist in " + store);
                }
                int count = partitionCount(store, tp.topic());
                if (tp.partition() >= count) {
                    throw ReadOptions.bad("assign", "topic '" + tp.topic() + "' has no partition " + tp.partition()
                            + " (it has " + count + ")");
                }
                out.add(tp);
            }
            return out;
        }
        for (String topic : topics(store)) {
            if (o.matches(topic)) {
                int count = partitionCount(store, topic);
                for (int i = 0; i < count; i++) out.add(new ReadOptions.TopicPartition(topic, i));
            }
        }
        return out;
    }

    /** Per-partition JSON must name exactly the partitions read (pylog/spark/options.py's check_partitions_named). */
    static void checkNamed(ReadOptions.Spec spec, List<ReadOptions.TopicPartition> read) {
        if (!spec.kind.equals("offsets") && !spec.kind.equals("timestamps")) return;
        Set<ReadOptions.TopicPartition> r = new TreeSet<>(read);
        Set<ReadOptions.TopicPartition> n = new TreeSet<>(spec.perPartition.keySet());
        if (r.equals(n)) return;
        List<String> problems = new ArrayList<>();
        Set<ReadOptions.TopicPartition> missing = new TreeSet<>(r);
        missing.removeAll(n);
        Set<ReadOptions.TopicPartition> extra = new TreeSet<>(n);
        extra.removeAll(r);
        if (!missing.isEmpty()) problems.add("missing " + join(missing));
        if (!extra.isEmpty()) {
            problems.add("not read by this query (no such partition, or not subscribed): " + join(extra));
        }
        String markers = !spec.kind.equals("offsets") ? ""
                : spec.starting() ? " (use -2 for earliest, -1 for latest)" : " (use -1 for latest)";
        throw ReadOptions.bad(spec.option, "must name every partition the query reads" + markers + ": "
                + String.join("; ", problems));
    }

    private static String join(Set<ReadOptions.TopicPartition> s) {
        List<String> names = new ArrayList<>();
        for (ReadOptions.TopicPartition tp : s) names.add(tp.toString());
        return String.join(", ", names);
    }

    /** The plan of a batch read: ranges resolved (ending at last stable offsets under read_committed, whose
     *  ranges then skip aborted transactions' records as they are read), cut by the pushed filters
     *  ({@code pushed}, or null), split. */
    static List<PylogInputPartition> plan(ReadOptions o, RangeFilter pushed) {
        try {
            List<ReadOptions.TopicPartition> parts = partitions(o);
            checkNamed(o.starting, parts);
            checkNamed(o.ending, parts);
            Path store = Paths.get(o.path);
            List<PylogInputPartition> ranges = new ArrayList<>();
            for (ReadOptions.TopicPartition tp : parts) {
                if (pushed != null && !pushed.allowsPartition(tp.partition())) continue;
                PartitionLog log = PartitionLog.open(store.resolve(tp.topic()).resolve(Integer.toString(tp.partition())));
                // read_committed: a read ends at the last stable offset (an open transaction starts there), as the
                // Kafka source's ending offsets do under that isolation level
                long endNow = o.committed ? new Transactions.Tracker().lastStableOffset(log, log.logEndOffset())
                        : log.logEndOffset();
                long startNow = log.logStartOffset();
                long start = resolve(o.starting, tp, startNow, endNow, log, o.startingByTimestampStrategy);
                long end = resolve(o.ending, tp, startNow, endNow, log, "error");
                String what = o.committed ? "the last stable offset (kafka.isolation.level=read_committed: an open "
                        + "transaction starts there)" : "the log end";
                if (end > endNow) {
                    throw ReadOptions.bad(o.ending.option, tp + ": end offset " + end + " is beyond " + what + " " + endNow);
                }
                if (start > endNow) {
                    throw ReadOptions.bad(o.starting.option, tp + ": start offset " + start + " is beyond " + what + " "
                            + endNow);
                }
                if (start > end) {
                    throw ReadOptions.bad(o.starting.option, tp + ": start offset " + start + " is after the end offset "
                            + end + " (" + o.ending.option + ")");
                }
                if (start < startNow) {
                    String msg = tp + ": offsets [" + start + ", " + Math.min(end, startNow) + ") were removed (the log now "
                            + "starts at " + startNow + ")";
                    DataLoss.report(o.failOnDataLoss, msg);
                    start = Math.min(startNow, end);
                }
                if (pushed != null) {
                    start = Math.max(start, pushed.offsetMin);
                    end = Math.min(end, pushed.offsetMax);
                    if (pushed.timestampMinMs != null && start < end) {
                        long found = log.offsetForTimestamp(pushed.timestampMinMs);
                        start = Math.max(start, found < 0 ? end : found);
                    }
                }
                if (start < end) ranges.add(new PylogInputPartition(o.path, tp.topic(), tp.partition(), start, end,
                        o.failOnDataLoss, o.committed));
            }
            return split(ranges, o.minPartitions, o.maxRecordsPerPartition);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The offset {@code spec} names for {@code tp} (pylog/spark/options.py's resolve_offset). */
    static long resolve(ReadOptions.Spec spec, ReadOptions.TopicPartition tp, long start, long end,
                                PartitionLog log, String strategy) throws IOException {
        boolean starting = spec.starting();
        switch (spec.kind) {
            case "earliest":
                return start;
            case "latest":
                return end;
            case "offsets": {
                long v = spec.perPartition.getOrDefault(tp, starting ? ReadOptions.EARLIEST : ReadOptions.LATEST);
                return v == ReadOptions.EARLIEST ? start : v == ReadOptions.LATEST ? end : v;
            }
            default:
                break;
        }
        long ts;
        if (spec.kind.equals("timestamp")) {
            ts = spec.timestamp;
        } else {
            Long named = spec.perPartition.get(tp);
            if (named == null) return starting ? start : end;
            ts = named;
        }
        long found = log.offsetForTimestamp(ts);
        if (found >= 0) return Math.max(found, start);
        if (starting && strategy.equals("error")) {
            throw ReadOptions.bad(spec.option, tp + " has no record with a timestamp >= " + ts
                    + "; use startingOffsetsByTimestampStrategy=latest to start at the log end");
        }
        return end;
    }

    /** Bounds of a task of packed ranges ({@link #pack}): records, and bytes as the segments' sizes suggest. */
    static final long PACK_RECORDS = 131_072;
    static final long PACK_BYTES = 16L << 20;

    /**
     * The ranges of a read whose pushed filters cut the partitions' offsets ({@link RangeFilter#cutsOffsets}), as
     * tasks: ranges of at most {@link #PACK_RECORDS} records and {@link #PACK_BYTES} bytes (estimated from the
     * partition's segment sizes) are packed, in plan order, into {@link RangeGroup}s within those bounds; larger
     * ranges stay a task each. Spark's fixed cost per task (scheduling, deserialising, opening the partition)
     * is several times what reading such a range costs (measured: 10,000 records of 100 bytes read in ~1 ms),
     * so a filter that keeps 1% of four partitions runs as one task, not four. The Kafka source's one task per
     * partition applies to unfiltered reads (it pushes no filter); {@code minPartitions} and
     * {@code maxRecordsPerPartition} are never packed (the caller does not pack when either is set).
     */
    static List<InputPartition> pack(List<PylogInputPartition> ranges) {
        List<InputPartition> out = new ArrayList<>();
        List<PylogInputPartition> group = new ArrayList<>();
        long records = 0;
        long bytes = 0;
        for (PylogInputPartition r : ranges) {
            long b = estimatedBytes(r);
            if (r.size() > PACK_RECORDS || b > PACK_BYTES) {
                out.add(r);
                continue;
            }
            if (records + r.size() > PACK_RECORDS || bytes + b > PACK_BYTES) {
                flush(group, out);
                records = 0;
                bytes = 0;
            }
            group.add(r);
            records += r.size();
            bytes += b;
        }
        flush(group, out);
        return out;
    }

    private static void flush(List<PylogInputPartition> group, List<InputPartition> out) {
        if (group.size() == 1) out.add(group.get(0));
        else if (group.size() > 1) out.add(new RangeGroup(group.toArray(new PylogInputPartition[0])));
        group.clear();
    }

    /** {@code r}'s bytes at the partition's mean record size: its segments' bytes over the offsets from its log
     *  start to {@code r}'s end (an overestimate where records follow the range: less packing, never more). */
    private static long estimatedBytes(PylogInputPartition r) {
        try {
            PartitionLog log = PartitionLog.open(Paths.get(r.store, r.topic, Integer.toString(r.partition)));
            double perRecord = (double) log.segmentBytes() / Math.max(1, r.until - log.logStartOffset());
            return (long) Math.ceil(perRecord * r.size());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static List<PylogInputPartition> split(List<PylogInputPartition> ranges, Integer minPartitions, Integer maxRecords) {
        List<PylogInputPartition> out = new ArrayList<>();
        long total = 0;
        for (PylogInputPartition r : ranges) total += r.size();
        for (PylogInputPartition r : ranges) {
            long size = r.size();
            long parts = 1;
            if (minPartitions != null && ranges.size() < minPartitions && total > 0) {
                parts = Math.max(1, Math.round((double) size / total * minPartitions));
            }
            if (maxRecords != null) parts = Math.max(parts, (size + maxRecords - 1) / maxRecords);
            parts = Math.max(1, Math.min(parts, size));
            long prev = r.from;
            for (long i = 1; i <= parts; i++) {
                long b = r.from + ((java.math.BigInteger.valueOf(size).multiply(java.math.BigInteger.valueOf(i)))
                        .divide(java.math.BigInteger.valueOf(parts)).longValue());
                if (b > prev) out.add(new PylogInputPartition(r.store, r.topic, r.partition, prev, b, r.failOnDataLoss,
                        r.committed));
                prev = b;
            }
        }
        return out;
    }
}
