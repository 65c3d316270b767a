package org.pylog.spark;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read at {@code kafka.isolation.level=read_committed} whose other options are all the JVM reader's: a
 * micro-batch stream runs on the JVM ({@link PylogStream}, ends at last stable offsets, aborted records
 * skipped by {@link ColumnarReader}); a batch read is planned and read by the Python source (this builder hands
 * it the pushed filters, as Spark would), and a continuous one is the Python source's to refuse. Spark asks a
 * table for one scan builder whatever the read is, so the choice is made when the scan is turned into a
 * batch or a stream. The columnar mode stays Spark's default (each reader factory says), which fits both.
 */
final class CommittedScan implements ScanBuilder, SupportsPushDownFilters, Scan {
    private final ScanBuilder python;
    private final CaseInsensitiveStringMap options;
    private final StructType schema;
    private Scan built;

    CommittedScan(ScanBuilder python, CaseInsensitiveStringMap options, StructType schema) {
        this.python = python;
        this.options = options;
        this.schema = schema;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        return python instanceof SupportsPushDownFilters p ? p.pushFilters(filters) : filters;
    }

    @Override
    public Filter[] pushedFilters() {
        return python instanceof SupportsPushDownFilters p ? p.pushedFilters() : new Filter[0];
    }

    @Override
    public Scan build() {
        return this;
    }

    private synchronized Scan python() {
        if (built == null) built = python.build();
        return built;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    /** The Python scan's: what a batch plan shows (a stream shows its {@link PylogStream}). */
    @Override
    public String description() {
        return python().description();
    }

    @Override
    public Batch toBatch() {
        return python().toBatch();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return PylogStream.of(options, schema);
    }

    @Override
    public ContinuousStream toContinuousStream(String checkpointLocation) {
        return python().toContinuousStream(checkpointLocation);
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
        return python().supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
        return python().reportDriverMetrics();
    }
}
