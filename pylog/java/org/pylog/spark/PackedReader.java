package org.pylog.spark;

import java.io.IOException;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One task's read of a {@link RangeGroup}: a {@link ColumnarReader} per range, in the group's order, each
 * opened when the one before has given its last batch and closed then.
 *
 * <p>Invariant: at most one range's reader is open; the batch {@link #get} returns is that reader's, valid until
 * the next {@link #next}, as Spark's contract for a columnar reader requires.
 */
final class PackedReader implements PartitionReader<ColumnarBatch> {
    private final PylogInputPartition[] ranges;
    private final StructType schema;
    private int nextRange;
    private ColumnarReader current;

    PackedReader(PylogInputPartition[] ranges, StructType schema) {
        this.ranges = ranges;
        this.schema = schema;
    }

    @Override
    public boolean next() throws IOException {
        while (true) {
            if (current == null) {
                if (nextRange >= ranges.length) return false;
                current = new ColumnarReader(ranges[nextRange++], schema);
            }
            if (current.next()) return true;
            current.close();
            current = null;
        }
    }

    @Override
    public ColumnarBatch get() {
        return current.get();
    }

    @Override
    public void close() {
        if (current != null) current.close();
        current = null;
    }
}
