package org.pylog.spark;

import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A store's subscribed partitions as a table: batch reads, with column pruning. */
final class PylogTable implements SupportsRead {
    private final StructType schema;
    private final ReadOptions options;

    PylogTable(StructType schema, ReadOptions options) {
        this.schema = schema;
        this.options = options;
    }

    @Override
    public String name() {
        return "pylog:" + options.path;
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap ignored) {
        return new Builder();
    }

    private final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private StructType required = schema;

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public Scan build() {
            return new PylogScan(required, options);
        }
    }

    private static final class PylogScan implements Scan, Batch {
        private final StructType readSchema;
        private final ReadOptions options;

        PylogScan(StructType readSchema, ReadOptions options) {
            this.readSchema = readSchema;
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return readSchema;
        }

        @Override
        public String description() {
            return "pylog (JVM reader) " + options.path;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<PylogInputPartition> ranges = Planner.plan(options);
            return ranges.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new PylogReaderFactory(readSchema);
        }
    }
}
