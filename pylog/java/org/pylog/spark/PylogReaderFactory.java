package org.pylog.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Makes each task's reader: columnar always (Spark turns batches into rows where a plan needs rows); a task of
 *  several small ranges ({@link RangeGroup}) reads them one after the other. */
final class PylogReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final StructType schema;

    PylogReaderFactory(StructType schema) {
        this.schema = schema;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException("the pylog JVM reader reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        if (partition instanceof RangeGroup g) return new PackedReader(g.ranges(), schema);
        return new ColumnarReader((PylogInputPartition) partition, schema);
    }
}
