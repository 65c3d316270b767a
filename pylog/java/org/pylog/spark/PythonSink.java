package org.pylog.spark;

import java.io.IOException;
import java.util.Iterator;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * The Python writer's {@link Write} (pylog/spark/writer.py) as {@code writeStream.format("pylog")} runs it, passed
 * through unchanged except for one case: a continuous query ({@code trigger(continuous=...)}) fails at its first
 * row with an error saying why, where Spark (4.x) would drop its rows silently.
 *
 * <p>Why: Spark's micro-batch engine hands a writer a task's rows at once ({@code DataWriter.writeAll}), which is
 * the only way a Python data source writer takes them; its continuous engine hands them one by one
 * ({@code DataWriter.write}), which Spark's Python writer ignores, then commits each epoch as if it had been
 * written. Only the continuous engine calls {@code write}, so that is where this refuses.
 */
final class PythonSink implements Write {
    static final String REFUSAL = Errors.lead("InvalidConfigError", "writeStream.format('pylog') cannot run with "
            + "trigger(continuous=...): Spark's continuous engine does not hand Python data source writers their rows "
            + "(pylog's writer is Python); use a processing-time or availableNow trigger");

    private final Write python;

    PythonSink(Write python) {
        this.python = python;
    }

    @Override
    public String description() {
        return python.description();
    }

    @Override
    public BatchWrite toBatch() {
        return python.toBatch();
    }

    @Override
    public StreamingWrite toStreaming() {
        StreamingWrite stream = python.toStreaming();
        return new StreamingWrite() {
            @Override
            public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
                return new Factory(stream.createStreamingWriterFactory(info));
            }

            @Override
            public boolean useCommitCoordinator() {
                return stream.useCommitCoordinator();
            }

            @Override
            public void commit(long epochId, WriterCommitMessage[] messages) {
                stream.commit(epochId, messages);
            }

            @Override
            public void abort(long epochId, WriterCommitMessage[] messages) {
                stream.abort(epochId, messages);
            }
        };
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
        return python.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
        return python.reportDriverMetrics();
    }

    /** Serialized to the executors with the Python factory it wraps. */
    private static final class Factory implements StreamingDataWriterFactory {
        private static final long serialVersionUID = 1L;
        private final StreamingDataWriterFactory python;

        Factory(StreamingDataWriterFactory python) {
            this.python = python;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            DataWriter<InternalRow> writer = python.createWriter(partitionId, taskId, epochId);
            return new DataWriter<InternalRow>() {
                @Override
                public void writeAll(Iterator<InternalRow> records) throws IOException {
                    writer.writeAll(records);
                }

                @Override
                public void write(InternalRow record) {
                    throw new UnsupportedOperationException(REFUSAL);
                }

                @Override
                public WriterCommitMessage commit() throws IOException {
                    return writer.commit();
                }

                @Override
                public void abort() throws IOException {
                    writer.abort();
                }

                @Override
                public void close() throws IOException {
                    writer.close();
                }

                @Override
                public CustomTaskMetric[] currentMetricsValues() {
                    return writer.currentMetricsValues();
                }
            };
        }
    }
}
