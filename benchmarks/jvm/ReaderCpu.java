package org.pylog.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Arrays;

import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM reader's own CPU per row (benchmarks/bench_jvm_reader.py): one thread reads every partition of a
 * topic through {@link ColumnarReader} into Spark's column vectors, as a task does, with no Spark around it
 * (no scheduling, no row conversion, no sink), and prints the thread's CPU time per row of each round.
 *
 * <p>Arguments: store, topic, partitions, records per partition, rounds, columns (comma-separated names of the
 * Kafka schema, or {@code all}).
 */
public final class ReaderCpu {
    private ReaderCpu() {
    }

    public static void main(String[] args) throws Exception {
        String store = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long records = Long.parseLong(args[3]);
        int rounds = Integer.parseInt(args[4]);
        StructType all = Schemas.kafka(false);
        StructType schema = args[5].equals("all") ? all
                : new StructType(Arrays.stream(args[5].split(",")).map(all::apply).toArray(
                        org.apache.spark.sql.types.StructField[]::new));
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long check = 0;
        for (int round = 0; round < rounds; round++) {
            long t0 = threads.getCurrentThreadCpuTime();
            long rows = 0;
            for (int p = 0; p < partitions; p++) {
                ColumnarReader reader = new ColumnarReader(new PylogInputPartition(store, topic, p, 0, records, true),
                        schema);
                while (reader.next()) {
                    ColumnarBatch batch = reader.get();
                    rows += batch.numRows();
                    check += batch.numRows() - 1;   // the batch is used, so nothing is optimized away
                }
                reader.close();
            }
            long cpu = threads.getCurrentThreadCpuTime() - t0;
            System.out.printf("round %d: %d rows, %.1f ns of CPU per row%n", round, rows, cpu / (double) rows);
        }
        System.out.println("checksum " + check);
    }
}
