package org.pylog.spark;

import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A store's subscribed partitions as a table. Reads and streams (micro-batch and continuous) with options this
 * reader handles are planned and read here, batch reads with column pruning; reads with other options, and
 * streaming writes, are the Python source's ({@link PylogProvider}); streaming writes take every output mode
 * Spark's Kafka sink takes, and refuse the continuous trigger ({@link PythonSink}). The Python table is made only
 * when one of those needs it, so a JVM read starts no Python worker.
 *
 * <p>Invariant: no batch write capability, so that Spark sends every batch save mode to
 * {@link PylogProvider#createRelation} (Spark refuses the default mode for a V2 table that writes).
 */
final class PylogTable implements SupportsRead, SupportsWrite {
    private final StructType schema;
    private final Transform[] partitioning;
    private final Map<String, String> properties;
    private Table python;

    PylogTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        this.schema = schema;
        this.partitioning = partitioning;
        this.properties = properties;
    }

    private synchronized Table python() {
        if (python == null) python = PylogProvider.python().getTable(schema, partitioning, properties);
        return python;
    }

    @Override
    public String name() {
        return "pylog:" + properties.getOrDefault("path", "");
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.CONTINUOUS_READ,
                TableCapability.STREAMING_WRITE);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        if (!ReadOptions.handles(options)) return ((SupportsRead) python()).newScanBuilder(options);
        return new Builder(options);
    }

    /** Streaming writes are the Python writer's, in every output mode Spark's Kafka sink accepts. */
    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return new KafkaSinkModes(((SupportsWrite) python()).newWriteBuilder(info));
    }

    /**
     * The output modes of Spark's Kafka sink on the Python writer: {@code update} (each micro-batch's changed
     * rows) and {@code complete} (the whole result table, every micro-batch) append their rows to the topic, as
     * the Kafka sink does, which also declares truncation it does not do. The Python write builder alone has
     * no update mode ({@code SupportsStreamingUpdateAsAppend} is Spark's internal trait, which a Python data
     * source cannot declare).
     */
    private static final class KafkaSinkModes implements SupportsTruncate, SupportsStreamingUpdateAsAppend {
        private final WriteBuilder python;

        KafkaSinkModes(WriteBuilder python) {
            this.python = python;
        }

        @Override
        public WriteBuilder truncate() {
            return this; // a topic is append-only: complete mode appends the result table, as Kafka's sink does
        }

        @Override
        public Write build() {
            return new PythonSink(python.build());
        }
    }

    private final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
            SupportsPushDownAggregates {
        private final CaseInsensitiveStringMap options;
        private StructType required = schema;
        private RangeFilter pushed;
        private Aggregation count;

        Builder(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        /** Filters on partition, offset and timestamp cut the planned ranges (always: the result is the same as
         *  without, so {@code filterPushdown} need not be set; the Python source prunes only with it). */
        @Override
        public Filter[] pushFilters(Filter[] filters) {
            pushed = RangeFilter.of(filters);
            return pushed.remaining.toArray(new Filter[0]);
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed == null ? new Filter[0] : pushed.applied.toArray(new Filter[0]);
        }

        /** {@code COUNT(*)} with no grouping is answered by the scan ({@link CountScan}); Spark offers it only
         *  when every filter was applied exactly by the ranges ({@link #pushFilters}). */
        @Override
        public boolean supportCompletePushDown(Aggregation aggregation) {
            return CountScan.answers(aggregation);
        }

        @Override
        public boolean pushAggregation(Aggregation aggregation) {
            if (!CountScan.answers(aggregation)) return false;
            count = aggregation;
            return true;
        }

        @Override
        public Scan build() {
            if (count != null) {
                ReadOptions parsed = ReadOptions.parse(options, false);
                Schemas.checkDeclared(schema, parsed.includeHeaders);
                return new CountScan(count, parsed, pushed);
            }
            return new PylogScan(required, options, pushed);
        }
    }

    private final class PylogScan implements Scan, Batch {
        private final StructType readSchema;
        private final CaseInsensitiveStringMap options;
        private final RangeFilter pushed;
        private ReadOptions parsed;
        /**
         * The input partitions of the first {@link #planInputPartitions} call. Spark asks a scan twice per query
         * (its physical plan, then adaptive execution's query stage, a copy of the scan node: measured on Spark
         * 4.3, 1-3 ms of the 1% filter's ~70 ms each time); this object belongs to one query's plan, so both
         * ask for the same snapshot, planned once (as Spark's file scans keep their partitions). Guarded by the
         * scan's lock: adaptive execution may ask from another driver thread than the first call's.
         */
        private InputPartition[] planned;

        PylogScan(StructType readSchema, CaseInsensitiveStringMap options, RangeFilter pushed) {
            this.readSchema = readSchema;
            this.options = options;
            this.pushed = pushed;
        }

        @Override
        public StructType readSchema() {
            return readSchema;
        }

        @Override
        public String description() {
            return "pylog (JVM reader) " + properties.getOrDefault("path", "");
        }

        @Override
        public Batch toBatch() {
            parsed = ReadOptions.parse(options, false);
            Schemas.checkDeclared(schema, parsed.includeHeaders);
            return this;
        }

        /** Streams with options this reader handles run here (PylogStream); others are the Python source's. */
        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            if (!ReadOptions.handlesStream(options)) {
                return ((SupportsRead) python()).newScanBuilder(options).build().toMicroBatchStream(checkpointLocation);
            }
            return PylogStream.of(options, schema);
        }

        /** {@code trigger(continuous=...)} ({@link PylogContinuous}). A batch-only option and
         *  {@code kafka.isolation.level=read_committed} are refused here by name; streams with an option this
         *  reader does not handle never get here: {@link #newScanBuilder} gives them to the Python source, whose
         *  scan Spark refuses to run continuously. */
        @Override
        public ContinuousStream toContinuousStream(String checkpointLocation) {
            String other = ReadOptions.notHandled(options, true);
            if (other != null) {
                throw ReadOptions.bad(other, "not supported with the continuous trigger: the JVM reader does not handle "
                        + "it yet and the Python source cannot run continuous queries (use a micro-batch trigger)");
            }
            ReadOptions parsed = ReadOptions.parse(options, true);
            Schemas.checkDeclared(schema, parsed.includeHeaders);
            return new PylogContinuous(parsed, readSchema);
        }

        /** The ranges, planned on the first call and the same on every later one ({@link #planned}). */
        @Override
        public synchronized InputPartition[] planInputPartitions() {
            if (planned == null) {
                List<PylogInputPartition> ranges = Planner.plan(parsed, pushed);
                if (pushed != null && pushed.cutsOffsets() && parsed.minPartitions == null
                        && parsed.maxRecordsPerPartition == null) {
                    planned = Planner.pack(ranges).toArray(new InputPartition[0]);
                } else {
                    planned = ranges.toArray(new InputPartition[0]);
                }
            }
            return planned.clone();
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new PylogReaderFactory(readSchema);
        }
    }
}
