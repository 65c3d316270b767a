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

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * A batch query's plan: the offset range of every partition it reads, resolved as pylog/spark/reader.py's
 * {@code plan_ranges} does, then split as its {@code split_ranges} does (the Kafka source's rule).
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

    private static void checkNamed(String option, String kind, java.util.Map<ReadOptions.TopicPartition, Long> named,
                                   List<ReadOptions.TopicPartition> read) {
        if (!kind.equals("offsets")) return;
        Set<ReadOptions.TopicPartition> r = new TreeSet<>(read);
        Set<ReadOptions.TopicPartition> n = new TreeSet<>(named.keySet());
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
        String markers = option.startsWith("starting") ? " (use -2 for earliest, -1 for latest)" : " (use -1 for latest)";
        throw ReadOptions.bad(option, "must name every partition the query reads" + markers + ": "
                + String.join("; ", problems));
    }

    private static String join(Set<ReadOptions.TopicPartition> s) {
        List<String> names = new ArrayList<>();
        for (ReadOptions.TopicPartition tp : s) names.add(tp.toString());
        return String.join(", ", names);
    }

    static List<PylogInputPartition> plan(ReadOptions o) {
        try {
            List<ReadOptions.TopicPartition> parts = partitions(o);
            checkNamed("startingOffsets", o.startingKind, o.starting, parts);
            checkNamed("endingOffsets", o.endingKind, o.ending, parts);
            Path store = Paths.get(o.path);
            List<PylogInputPartition> ranges = new ArrayList<>();
            for (ReadOptions.TopicPartition tp : parts) {
                PartitionLog log = PartitionLog.open(store.resolve(tp.topic()).resolve(Integer.toString(tp.partition())));
                long endNow = log.logEndOffset();
                long startNow = log.logStartOffset();
                long start = resolve(o.startingKind, o.starting.getOrDefault(tp, ReadOptions.EARLIEST), startNow, endNow);
                long end = resolve(o.endingKind, o.ending.getOrDefault(tp, ReadOptions.LATEST), startNow, endNow);
                if (end > endNow) {
                    throw ReadOptions.bad("endingOffsets", tp + ": end offset " + end + " is beyond the log end " + endNow);
                }
                if (start > endNow) {
                    throw ReadOptions.bad("startingOffsets", tp + ": start offset " + start + " is beyond the log end " + endNow);
                }
                if (start > end) {
                    throw ReadOptions.bad("startingOffsets", tp + ": start offset " + start + " is after the end offset "
                            + end + " (endingOffsets)");
                }
                if (start < startNow) {
                    String msg = tp + ": offsets [" + start + ", " + Math.min(end, startNow) + ") were removed (the log now "
                            + "starts at " + startNow + ")";
                    if (o.failOnDataLoss) {
                        throw new IllegalStateException(msg + " (set failOnDataLoss=false to skip what is gone)");
                    }
                    start = Math.min(startNow, end);
                }
                if (start < end) ranges.add(new PylogInputPartition(o.path, tp.topic(), tp.partition(), start, end));
            }
            return split(ranges, o.minPartitions, o.maxRecordsPerPartition);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static long resolve(String kind, long value, long start, long end) {
        if (kind.equals("earliest")) return start;
        if (kind.equals("latest")) return end;
        return value == ReadOptions.EARLIEST ? start : value == ReadOptions.LATEST ? end : value;
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
                if (b > prev) out.add(new PylogInputPartition(r.store, r.topic, r.partition, prev, b));
                prev = b;
            }
        }
        return out;
    }
}
