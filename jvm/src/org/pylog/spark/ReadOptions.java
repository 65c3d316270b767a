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

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A batch read's options, parsed and checked as pylog/spark/options.py does (the reference): the same names,
 * defaults and error messages, for the options this reader supports so far. An option it does not support
 * yet is refused by name, so that a query never silently reads something else than the Python reader would.
 */
final class ReadOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    static final long EARLIEST = -2;
    static final long LATEST = -1;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String[] SUBSCRIBE = {"subscribe", "subscribePattern", "assign"};
    private static final String[] SUPPORTED = {"path", "subscribe", "subscribePattern", "assign", "startingOffsets",
        "endingOffsets", "minPartitions", "maxRecordsPerPartition", "includeHeaders", "failOnDataLoss"};
    private static final String[] NOT_YET = {"startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "filterPushdown"};

    final String path;
    final String subscribeKind;
    final List<String> topics = new ArrayList<>();
    final String pattern;
    final List<TopicPartition> assigned = new ArrayList<>();
    final String startingKind;   // earliest | offsets
    final Map<TopicPartition, Long> starting = new LinkedHashMap<>();
    final String endingKind;     // latest | offsets
    final Map<TopicPartition, Long> ending = new LinkedHashMap<>();
    final Integer minPartitions;
    final Integer maxRecordsPerPartition;
    final boolean includeHeaders;
    final boolean failOnDataLoss;

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

    private ReadOptions(Map<String, String> o) {
        path = storePath(o.get("path"));
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
            try {
                Pattern.compile(raw);
            } catch (PatternSyntaxException e) {
                throw bad("subscribePattern", "not a valid regular expression (" + e.getDescription() + "): '" + raw + "'");
            }
            pat = raw;
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
        String start = o.getOrDefault("startingOffsets", "earliest").strip();
        if (start.equalsIgnoreCase("latest")) {
            throw bad("startingOffsets", "'latest' is not allowed for batch queries (nothing would be read)");
        }
        if (start.equalsIgnoreCase("earliest")) {
            startingKind = "earliest";
        } else {
            startingKind = "offsets";
            perPartition(o, "startingOffsets", start, starting, new long[] {EARLIEST, LATEST});
            if (starting.containsValue(LATEST)) {
                throw bad("startingOffsets", "-1 (latest) is not allowed as a batch query's start");
            }
        }
        String end = o.getOrDefault("endingOffsets", "latest").strip();
        if (end.equalsIgnoreCase("earliest")) {
            throw bad("endingOffsets", "'earliest' is not allowed as the end of a query");
        }
        if (end.equalsIgnoreCase("latest")) {
            endingKind = "latest";
        } else {
            endingKind = "offsets";
            perPartition(o, "endingOffsets", end, ending, new long[] {LATEST});
        }
        minPartitions = intOption(o, "minPartitions", 1);
        maxRecordsPerPartition = intOption(o, "maxRecordsPerPartition", 1);
        includeHeaders = boolOption(o, "includeHeaders", false);
        failOnDataLoss = boolOption(o, "failOnDataLoss", true);
    }

    static ReadOptions parse(CaseInsensitiveStringMap options) {
        Map<String, String> canon = new LinkedHashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            String low = e.getKey().toLowerCase(Locale.ROOT);
            String name = null;
            for (String s : SUPPORTED) {
                if (s.toLowerCase(Locale.ROOT).equals(low)) name = s;
            }
            for (String s : NOT_YET) {
                if (s.toLowerCase(Locale.ROOT).equals(low)) {
                    throw bad(s, "not supported by the JVM reader yet; read with the Python reader (format(\"pylog\"))");
                }
            }
            if (name == null) {
                if (low.startsWith("kafka.")) continue;
                throw bad(e.getKey(), "unknown option for batch reads (known: " + String.join(", ", SUPPORTED) + ")");
            }
            if (e.getValue() != null) canon.put(name, e.getValue());
        }
        return new ReadOptions(canon);
    }

    static IllegalArgumentException bad(String option, String message) {
        return new IllegalArgumentException("option '" + option + "': " + message);
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

    private static void perPartition(Map<String, String> o, String name, String raw, Map<TopicPartition, Long> out,
                                     long[] markers) {
        if (!raw.startsWith("{")) {
            throw bad(name, "expected earliest, latest or per-partition JSON, got '" + raw + "'");
        }
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
                for (long m : markers) marker |= m == value;
                if (value < 0 && !marker) {
                    StringBuilder allowed = new StringBuilder(" (or ");
                    for (int i = 0; i < markers.length; i++) allowed.append(i > 0 ? ", " : "").append(markers[i]);
                    throw bad(name, topic + "-" + number + ": " + value + " is not a valid value; use >= 0" + allowed + ")");
                }
                out.put(new TopicPartition(topic, number), value);
            }
        }
    }

    private static Integer intOption(Map<String, String> o, String name, int minimum) {
        String raw = o.get(name);
        if (raw == null) return null;
        int v;
        try {
            v = Integer.parseInt(raw.strip());
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

    /** True if {@code topic} belongs to the subscription (a pattern never matches pylog's internal topics). */
    boolean matches(String topic) {
        return switch (subscribeKind) {
            case "subscribe" -> topics.contains(topic);
            case "subscribePattern" -> !topic.startsWith("__") && Pattern.compile(pattern).matcher(topic).matches();
            default -> assigned.stream().anyMatch(tp -> tp.topic().equals(topic));
        };
    }
}
