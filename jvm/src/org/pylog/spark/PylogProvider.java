package org.pylog.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM reader of the pylog format as a DataSource V2 table provider: {@code spark.read.format(...)} with the
 * store directory as the path and Spark's Kafka source's options. The schema is the Kafka source's (docs/SPARK.md).
 */
public final class PylogProvider implements TableProvider, DataSourceRegister {
    /** The name this provider answers to while the Python source owns {@code "pylog"}. */
    public static final String NAME = "pylog-jvm";

    @Override
    public String shortName() {
        return NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return Schemas.kafka(ReadOptions.parse(options).includeHeaders);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true; // a declared subset of the columns is a pruned read, as with the Python source
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
        ReadOptions opts = ReadOptions.parse(options);
        Schemas.checkDeclared(schema, opts.includeHeaders);
        return new PylogTable(schema, opts);
    }
}
