package org.pylog.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * Pushed-down filters as bounds (pylog/spark/reader.py's RangeFilter and filter_from_pushed): partitions kept
 * in {@code [partitionMin, partitionMax)} and, unless {@code partitions} is null, in that set; offsets in
 * {@code [offsetMin, offsetMax)}; records from the time index's answer for {@code timestampMinMs} on.
 *
 * <p>Invariant: a filter is reported as applied ({@link #remaining} leaves it out) only when the planned
 * ranges hold exactly the rows it keeps: integer comparisons and {@code IN} on {@code partition}, integer
 * comparisons on {@code offset}, {@code IS NOT NULL} on a column that is never null (so that Spark, seeing
 * every filter applied, offers aggregates to {@link CountScan}). {@code IN} on offsets and timestamp lower bounds only narrow the ranges and
 * stay with Spark; upper bounds on timestamps are not used (CreateTime need not grow with offsets).
 */
final class RangeFilter {
    Set<Integer> partitions;
    long partitionMin = 0;
    long partitionMax = Long.MAX_VALUE;
    long offsetMin = 0;
    long offsetMax = Long.MAX_VALUE;
    Long timestampMinMs;
    /** The columns every row has a value in (only key, value and headers can be null). */
    private static final Set<String> NEVER_NULL = Set.of("topic", "partition", "offset", "timestamp", "timestampType");
    final List<Filter> remaining = new ArrayList<>();
    final List<Filter> applied = new ArrayList<>();

    /** True when these filters bound offsets (or timestamps from below), so that the planned ranges may be
     *  small parts of the partitions ({@link Planner#pack}). */
    boolean cutsOffsets() {
        return offsetMin > 0 || offsetMax < Long.MAX_VALUE || timestampMinMs != null;
    }

    boolean allowsPartition(int n) {
        return partitionMin <= n && n < partitionMax && (partitions == null || partitions.contains(n));
    }

    static RangeFilter of(Filter[] filters) {
        RangeFilter r = new RangeFilter();
        for (Filter f : filters) {
            if (!r.fold(f)) r.remaining.add(f);
        }
        r.partitionMax = Math.max(r.partitionMin, r.partitionMax);
        r.offsetMax = Math.max(r.offsetMin, r.offsetMax);
        return r;
    }

    private static Long integer(Object v) {
        return v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte
                ? ((Number) v).longValue() : null;
    }

    /** Folds {@code f} in; true when the ranges apply it exactly (Spark need not). */
    private boolean fold(Filter f) {
        String column;
        Object value;
        if (f instanceof EqualTo e) {
            column = e.attribute();
            value = e.value();
        } else if (f instanceof GreaterThan e) {
            column = e.attribute();
            value = e.value();
        } else if (f instanceof GreaterThanOrEqual e) {
            column = e.attribute();
            value = e.value();
        } else if (f instanceof LessThan e) {
            column = e.attribute();
            value = e.value();
        } else if (f instanceof LessThanOrEqual e) {
            column = e.attribute();
            value = e.value();
        } else if (f instanceof In in) {
            return foldIn(in);
        } else if (f instanceof IsNotNull nn && NEVER_NULL.contains(nn.attribute())) {
            applied.add(f); // Spark adds these beside comparisons; such a column has a value in every row
            return true;
        } else {
            return false;
        }
        if (column.equals("timestamp")) {
            if (f instanceof EqualTo || f instanceof GreaterThan || f instanceof GreaterThanOrEqual) {
                Long ms = millis(value);
                if (ms != null) timestampMinMs = timestampMinMs == null ? ms : Math.max(timestampMinMs, ms);
            }
            return false;
        }
        Long v = integer(value);
        if (v == null || (!column.equals("partition") && !column.equals("offset"))) return false;
        long lo = 0;
        long hi = Long.MAX_VALUE;
        if (f instanceof EqualTo) {
            lo = v;
            hi = after(v);
        } else if (f instanceof GreaterThan) {
            lo = after(v);
        } else if (f instanceof GreaterThanOrEqual) {
            lo = v;
        } else if (f instanceof LessThan) {
            hi = v;
        } else {
            hi = after(v);
        }
        bound(column, lo, hi);
        applied.add(f);
        return true;
    }

    /** {@code v + 1}, but Long.MAX_VALUE for Long.MAX_VALUE: an exclusive bound past every offset rather than a
     *  wrapped one ({@code offset <= 9223372036854775807} read nothing, {@code offset > 9223372036854775807} all). */
    private static long after(long v) {
        return v == Long.MAX_VALUE ? v : v + 1;
    }

    private void bound(String column, long lo, long hi) {
        if (column.equals("partition")) {
            partitionMin = Math.max(partitionMin, lo);
            partitionMax = Math.min(partitionMax, hi);
        } else {
            offsetMin = Math.max(offsetMin, lo);
            offsetMax = Math.min(offsetMax, hi);
        }
    }

    private boolean foldIn(In in) {
        String column = in.attribute();
        if (!column.equals("partition") && !column.equals("offset")) return false;
        Object[] values = in.values();
        if (values.length == 0) return false;
        long min = Long.MAX_VALUE;
        long max = Long.MIN_VALUE;
        Set<Integer> set = new HashSet<>();
        for (Object o : values) {
            Long v = integer(o);
            if (v == null) return false;
            min = Math.min(min, v);
            max = Math.max(max, v);
            if (v >= Integer.MIN_VALUE && v <= Integer.MAX_VALUE) set.add(v.intValue());
        }
        bound(column, min, after(max));
        if (!column.equals("partition")) return false; // offsets IN (...): only bounded here, not exact
        if (partitions == null) {
            partitions = set;
        } else {
            partitions.retainAll(set);
        }
        applied.add(in);
        return true;
    }

    /** A timestamp literal in ms since the epoch, rounded down (Spark hands absolute instants to a JVM source). */
    private static Long millis(Object v) {
        if (v instanceof Timestamp t) return t.getTime();
        if (v instanceof Instant i) return i.toEpochMilli();
        return null;
    }
}
