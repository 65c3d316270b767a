package org.pylog.spark;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code failOnDataLoss} as Spark's Kafka source and the Python reader apply it (pylog/spark/reader.py's
 * {@code _data_loss}): offsets a query planned to read that are gone fail it with the Python reader's message,
 * or, with {@code failOnDataLoss=false}, are skipped with a warning naming them.
 */
final class DataLoss {
    private static final Logger LOG = LoggerFactory.getLogger("org.pylog.spark");

    private DataLoss() {
    }

    /** @throws IllegalStateException with {@code fail} (the Kafka source's exception for data loss) */
    static void report(boolean fail, String message) {
        if (fail) {
            throw new IllegalStateException(Errors.lead("DataLossError", message
                    + " (set failOnDataLoss=false to skip what is gone)"));
        }
        LOG.warn("pylog: {}; skipping it (failOnDataLoss=false)", message);
    }
}
