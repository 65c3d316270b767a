package org.pylog.spark;

import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;


/**
 * A batch read's options, parsed and checked as pylog/spark/options.py does (the reference): the same names,
 * defaults and error messages, for the options this reader supports so far. A read with any other option is
 * not this reader's ({@link #handles}): {@link PylogTable} gives it to the Python source, so that a query never
 * silently reads something else than the Python reader would.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    static final long EARLIEST = -2;
    static final long LATEST = -1;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] SUBSCRIBE = {"subscribe", "subscribePattern", "assign"};
    private static final String[] SUPPORTED = {"path", "subscribe", "subscribePattern", "assign", "startingOffsets",
        "endingOffsets", "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy", "minPartitions", "maxRecordsPerPartition", "includeHeaders",
        "failOnDataLoss", "filterPushdown", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"};
    /** Options of batch reads only: a stream with one is the Python source's, which refuses it by name. */
    static final String[] BATCH_ONLY = {"endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "filterPushdown"};
    /** Options of Spark's Kafka source that a batch read ignores, as the Python source does (which logs them). */
    private static final String[] IGNORED = {"kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs", "groupIdPrefix", "topic"};

    final String path;
    final String subscribeKind;
    final List<String> topics = new ArrayList<>();
    final String pattern;
    final List<TopicPartition> assigned = new ArrayList<>();
    final Spec starting;
    final Spec ending;
    final String startingByTimestampStrategy;   // error | latest
    final Integer minPartitions;
    final Integer maxRecordsPerPartition;
    final boolean includeHeaders;
    final boolean failOnDataLoss;
    final boolean filterPushdown;
    // Streaming reads only (ignored by batch reads, as in Kafka): at most / at least this many offsets per
    // micro-batch, and how long a trigger may wait for the minimum (Kafka's default 15 minutes).
    final Integer maxOffsetsPerTrigger;
    final Integer minOffsetsPerTrigger;
    final long maxTriggerDelayMs;
    /** {@code kafka.isolation.level=read_committed}: batch reads and micro-batch streams (continuous ones at that
     *  level are refused, {@link #notHandled}); ends are last stable offsets, aborted records skipped. */
    boolean committed;

    /**
     * Where reading starts or ends in each partition, as pylog/spark/options.py's OffsetSpec: {@code kind} is
     * earliest, latest, offsets ({@code perPartition}: offset, -2 or -1), timestamp ({@code timestamp} for
     * every partition) or timestamps ({@code perPartition}: a timestamp); {@code option} names its option.
     */
    static final class Spec implements Serializable {
        private static final long serialVersionUID = 1L;
        final String kind;
        final String option;
        final long timestamp;
        final Map<TopicPartition, Long> perPartition = new LinkedHashMap<>();

        Spec(String kind, String option, long timestamp) {
            this.kind = kind;
            this.option = option;
            this.timestamp = timestamp;
        }

        boolean starting() {
            return option.startsWith("starting");
        }
    }

    /** A topic's partition, as the per-partition JSON options name it. */
    record TopicPartition(String topic, int partition) implements Serializable, Comparable<TopicPartition> {
        @Override
        public int compareTo(TopicPartition o) {
            int c = topic.compareTo(o.topic);
            return c != 0 ? c : Integer.compare(partition, o.partition);
        }

        @Override
        public String toString() {
            return topic + "-" + partition;
        }
    }

    /** {@code streaming}: false for a batch read, null when not known yet (schema inference: lenient). */
    private ReadOptions(Map<String, String> o, Boolean streaming) {
        path = storePath(o.get("path"));
        String strategy = o.getOrDefault("startingOffsetsByTimestampStrategy", "error").strip().toLowerCase(Locale.ROOT);
        if (!strategy.equals("error") && !strategy.equals("latest")) {
            throw bad("startingOffsetsByTimestampStrategy", "expected error or latest, got '" + strategy + "'");
        }
        startingByTimestampStrategy = strategy;
        List<String> given = new ArrayList<>();
        for (String s : SUBSCRIBE) {
            if (o.containsKey(s)) given.add(s);
        }
        if (given.size() != 1) {
            throw bad("subscribe", "give exactly one of subscribe, subscribePattern, assign; "
                    + (given.isEmpty() ? "none was given" : "got " + String.join(", ", given)));
        }
        subscribeKind = given.get(0);
        String raw = o.get(subscribeKind);
        String pat = null;
        if (subscribeKind.equals("subscribe")) {
            for (String t : raw.split(",")) {
                if (!t.strip().isEmpty()) topics.add(t.strip());
            }
            if (topics.isEmpty()) throw bad("subscribe", "no topic given");
        } else if (subscribeKind.equals("subscribePattern")) {
            pat = javaPattern(raw);
            try {
                Pattern.compile(pat);
            } catch (PatternSyntaxException e) {
                throw bad("subscribePattern", "not a valid regular expression (" + e.getDescription() + "): '" + raw + "'");
            }
        } else {
            TreeSet<TopicPartition> set = new TreeSet<>();
            JsonNode doc = jsonObject(o, "assign");
            for (Iterator<Map.Entry<String, JsonNode>> it = doc.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> e = it.next();
                JsonNode parts = e.getValue();
                boolean ok = parts.isArray();
                if (ok) {
                    for (JsonNode p : parts) ok &= p.isIntegralNumber() && p.canConvertToInt() && p.asInt() >= 0;
                }
                if (!ok) {
                    throw bad("assign", "topic '" + e.getKey() + "': expected a list of partition numbers, got " + parts);
                }
                for (JsonNode p : parts) set.add(new TopicPartition(e.getKey(), p.asInt()));
            }
            if (set.isEmpty()) throw bad("assign", "no partition given");
            assigned.addAll(set);
        }
        pattern = pat;
        starting = offsetSpec(o, "starting", Boolean.TRUE.equals(streaming) ? "latest" : "earliest",
                !Boolean.FALSE.equals(streaming));
        ending = offsetSpec(o, "ending", "latest", false);
        minPartitions = intOption(o, "minPartitions", 1);
        maxRecordsPerPartition = intOption(o, "maxRecordsPerPartition", 1);
        includeHeaders = boolOption(o, "includeHeaders", false);
        failOnDataLoss = boolOption(o, "failOnDataLoss", true);
        filterPushdown = boolOption(o, "filterPushdown", false);
        maxOffsetsPerTrigger = intOption(o, "maxOffsetsPerTrigger", 1);
        minOffsetsPerTrigger = intOption(o, "minOffsetsPerTrigger", 1);
        String delay = o.getOrDefault("maxTriggerDelay", "15m").strip();
        long ms;
        try {
            ms = org.apache.spark.network.util.JavaUtils.timeStringAsMs(delay);
        } catch (RuntimeException e) {
            throw bad("maxTriggerDelay", "expected a duration such as 15m or 30s, got '" + delay + "'");
        }
        if (ms < 0) throw bad("maxTriggerDelay", "must be >= 0, got '" + delay + "'");
        maxTriggerDelayMs = ms;
    }

    /** The starting or ending spec: {@code <side>Timestamp} beats {@code <side>OffsetsByTimestamp} beats
     *  {@code <side>Offsets} (the Kafka source's precedence); {@code lenient}: a streaming start is allowed. */
    private static Spec offsetSpec(Map<String, String> o, String side, String dflt, boolean lenient) {
        String tsName = side + "Timestamp";
        String byName = side + "OffsetsByTimestamp";
        String offName = side + "Offsets";
        if (o.containsKey(tsName)) {
            return new Spec("timestamp", tsName, longOption(o, tsName, 0));
        }
        if (o.containsKey(byName)) {
            Spec spec = new Spec("timestamps", byName, 0);
            perPartition(o, byName, spec.perPartition, null);
            return spec;
        }
        boolean starting = side.equals("starting");
        String raw = o.getOrDefault(offName, dflt).strip();
        String low = raw.toLowerCase(Locale.ROOT);
        if (low.equals("earliest") || low.equals("latest")) {
            if (!lenient && starting && low.equals("latest")) {
                throw bad(offName, "'latest' is not allowed for batch queries (nothing would be read)");
            }
            if (!starting && low.equals("earliest")) {
                throw bad(offName, "'earliest' is not allowed as the end of a query");
            }
            return new Spec(low, offName, 0);
        }
        if (!raw.startsWith("{")) {
            throw bad(offName, "expected earliest, latest or per-partition JSON, got '" + raw + "'");
        }
        Spec spec = new Spec("offsets", offName, 0);
        perPartition(o, offName, spec.perPartition, starting ? new long[] {EARLIEST, LATEST} : new long[] {LATEST});
        if (!lenient && starting && spec.perPartition.containsValue(LATEST)) {
            throw bad(offName, "-1 (latest) is not allowed as a batch query's start");
        }
        return spec;
    }

    /** True if a micro-batch stream's options are all this reader's (see {@link #handles}) and none is a batch
     *  read's. */
    static boolean handlesStream(Map<String, String> options) {
        return notHandled(options, true, true) == null;
    }

    /** True if every option of a read is one this reader supports (else the Python source reads it), either
     *  isolation level included. A path s3://bucket/prefix (a bucket a store ships to: tiered storage) is the
     *  Python source's. */
    static boolean handles(Map<String, String> options) {
        return notHandled(options, false, true) == null;
    }

    /** The first option (as given) that makes a read, or a continuous stream with {@code stream}, not this
     *  reader's ({@code kafka.isolation.level=read_committed} is not a continuous stream's); null if there is
     *  none (see {@link #handles}, {@link #handlesStream}). */
    static String notHandled(Map<String, String> options, boolean stream) {
        return notHandled(options, stream, false);
    }

    private static String notHandled(Map<String, String> options, boolean stream, boolean committedOk) {
        for (Map.Entry<String, String> e : options.entrySet()) {
            String low = e.getKey().toLowerCase(Locale.ROOT);
            if (stream && indexOf(BATCH_ONLY, low) >= 0) return e.getKey();
            if (low.equals("path") && String.valueOf(e.getValue()).toLowerCase(Locale.ROOT).startsWith("s3://")) {
                return e.getKey();
            }
            if (low.equals("kafka.isolation.level")) {
                String level = String.valueOf(e.getValue()).strip();
                if (!"read_uncommitted".equalsIgnoreCase(level) && !(committedOk && "read_committed".equalsIgnoreCase(level))) {
                    return e.getKey();
                }
                continue;
            }
            if (low.startsWith("kafka.") || indexOf(IGNORED, low) >= 0) continue;
            if (indexOf(SUPPORTED, low) < 0) return e.getKey();
        }
        return null;
    }

    private static int indexOf(String[] names, String low) {
        for (int i = 0; i < names.length; i++) {
            if (names[i].toLowerCase(Locale.ROOT).equals(low)) return i;
        }
        return -1;
    }

    /** Parses a read's options ({@code streaming}: false for a batch read, null when not known yet). */
    static ReadOptions parse(Map<String, String> options, Boolean streaming) {
        Map<String, String> canon = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            String low = e.getKey().toLowerCase(Locale.ROOT);
            if (low.startsWith("kafka.") || indexOf(IGNORED, low) >= 0) continue;
            int i = indexOf(SUPPORTED, low);
            String name = i >= 0 ? SUPPORTED[i] : null;
            if (name == null) {
                throw bad(e.getKey(), "not handled by the JVM reader (known: " + String.join(", ", SUPPORTED) + ")");
            }
            if (e.getValue() != null) canon.put(name, e.getValue());
        }
        ReadOptions parsed = new ReadOptions(canon, streaming);
        for (Map.Entry<String, String> e : options.entrySet()) {
            if (e.getKey().equalsIgnoreCase("kafka.isolation.level") && e.getValue() != null) {
                parsed.committed = "read_committed".equalsIgnoreCase(e.getValue().strip());
            }
        }
        return parsed;
    }

    static IllegalArgumentException bad(String option, String message) {
        return new IllegalArgumentException(Errors.lead("InvalidOptionError", "option '" + option + "': " + message));
    }

    private static String storePath(String raw) {
        if (raw == null || raw.isEmpty()) throw bad("path", "give the store directory: .load(path) / .save(path)");
        var url = Pattern.compile("^([A-Za-z][A-Za-z0-9+.-]*)://").matcher(raw);
        if (url.find() && !url.group(1).equalsIgnoreCase("file")) {
            throw bad("path", "'" + raw + "': a pylog store must be on a local or shared (mounted) filesystem; "
                    + url.group(1) + ":// paths are not supported. Give the directory as a local path, on a "
                    + "filesystem every executor mounts");
        }
        String p = raw.startsWith("file://") ? raw.substring(7) : raw.startsWith("file:") ? raw.substring(5) : raw;
        Path abs = Paths.get(p).toAbsolutePath().normalize();
        if (!Files.isRegularFile(abs.resolve("pylog.store"))) {
            throw bad("path", abs + " is not a pylog store (no pylog.store; is it visible here?)");
        }
        return abs.toString();
    }

    private static JsonNode jsonObject(Map<String, String> o, String name) {
        String raw = o.get(name);
        JsonNode doc;
        try {
            doc = JSON.readTree(raw);
        } catch (Exception e) {
            throw bad(name, "not valid JSON (" + e.getMessage().split("\n")[0] + "): '" + raw + "'");
        }
        if (doc == null || !doc.isObject()) throw bad(name, "expected a JSON object, got '" + raw + "'");
        return doc;
    }

    /** {@code {"topic": {"0": n}}} into {@code out}; {@code markers} (-2, -1) allowed as listed, or none (null). */
    private static void perPartition(Map<String, String> o, String name, Map<TopicPartition, Long> out,
                                     long[] markers) {
        JsonNode doc = jsonObject(o, name);
        for (Iterator<Map.Entry<String, JsonNode>> it = doc.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            String topic = e.getKey();
            if (!e.getValue().isObject()) {
                throw bad(name, "topic '" + topic + "': expected an object of partition -> value");
            }
            for (Iterator<Map.Entry<String, JsonNode>> pit = e.getValue().fields(); pit.hasNext(); ) {
                Map.Entry<String, JsonNode> pe = pit.next();
                int number;
                try {
                    number = Integer.parseInt(pe.getKey().strip());
                } catch (NumberFormatException x) {
                    throw bad(name, "topic '" + topic + "': partition '" + pe.getKey() + "' is not an integer");
                }
                JsonNode v = pe.getValue();
                if (!v.isIntegralNumber() || !v.canConvertToLong()) {
                    throw bad(name, topic + "-" + number + ": expected an integer, got " + v);
                }
                long value = v.asLong();
                boolean marker = false;
                if (markers != null) {
                    for (long m : markers) marker |= m == value;
                }
                if (value < 0 && !marker) {
                    StringBuilder allowed = new StringBuilder();
                    if (markers != null && markers.length > 0) {
                        allowed.append(" (or ");
                        for (int i = 0; i < markers.length; i++) allowed.append(i > 0 ? ", " : "").append(markers[i]);
                        allowed.append(")");
                    }
                    throw bad(name, topic + "-" + number + ": " + value + " is not a valid value; use >= 0" + allowed);
                }
                out.put(new TopicPartition(topic, number), value);
            }
        }
    }

    /** An integer option, or null when not given; values past int's range count as its largest (a count). */
    private static Integer intOption(Map<String, String> o, String name, int minimum) {
        if (o.get(name) == null) return null;
        return (int) Math.min(Integer.MAX_VALUE, longOption(o, name, minimum));
    }

    private static long longOption(Map<String, String> o, String name, long minimum) {
        String raw = o.get(name);
        long v;
        try {
            v = Long.parseLong(raw.strip());
        } catch (NumberFormatException e) {
            throw bad(name, "expected an integer, got '" + raw + "'");
        }
        if (v < minimum) throw bad(name, "must be >= " + minimum + ", got " + v);
        return v;
    }

    private static boolean boolOption(Map<String, String> o, String name, boolean dflt) {
        String raw = o.get(name);
        if (raw == null) return dflt;
        String low = raw.strip().toLowerCase(Locale.ROOT);
        if (low.equals("true") || low.equals("false")) return low.equals("true");
        throw bad(name, "expected true or false, got '" + raw + "'");
    }

    /**
     * A {@code subscribePattern}, a Python regular expression (the Python source's {@code re.fullmatch}), in
     * java.util.regex's spelling: Python's named groups {@code (?P<n>...)} and {@code (?P=n)} become {@code (?<n>...)}
     * and {@code \k<n>} (outside character classes and escapes). The dialects agree on the rest of what topic
     * names need; constructs only one has (Java's {@code \Q...\E}, {@code \p{...}}) differ (docs/SPARK.md).
     */
    static String javaPattern(String python) {
        StringBuilder out = new StringBuilder(python.length());
        boolean inClass = false;
        for (int i = 0; i < python.length(); i++) {
            char c = python.charAt(i);
            if (c == '\\' && i + 1 < python.length()) {
                out.append(c).append(python.charAt(++i));
            } else if (inClass) {
                inClass = c != ']';
                out.append(c);
            } else if (c == '[') {
                inClass = true;
                out.append(c);
                if (python.startsWith("^", i + 1)) out.append(python.charAt(++i));
                if (python.startsWith("]", i + 1)) out.append(python.charAt(++i)); // a leading ] is literal
            } else if (python.startsWith("(?P<", i)) {
                out.append("(?<");
                i += 3;
            } else if (python.startsWith("(?P=", i) && python.indexOf(')', i) > 0) {
                int end = python.indexOf(')', i);
                out.append("\\k<").append(python, i + 4, end).append('>');
                i = end;
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    /** True if {@code topic} belongs to the subscription (a pattern never matches pylog's internal topics). */
    boolean matches(String topic) {
        return switch (subscribeKind) {
            case "subscribe" -> topics.contains(topic);
            case "subscribePattern" -> !topic.startsWith("__") && Pattern.compile(pattern).matcher(topic).matches();
            default -> assigned.stream().anyMatch(tp -> tp.topic().equals(topic));
        };
    }
}
