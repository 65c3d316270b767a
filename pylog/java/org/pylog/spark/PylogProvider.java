package org.pylog.spark;

import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code format("pylog")} when the jar is loaded: the one name for reads, writes and streams (docs/SPARK.md,
 * "Which reader runs").
 *
 * <p>A JVM {@code DataSourceRegister} named {@code pylog} wins over the Python data source of the same name, so
 * this provider owns the name and hands to the Python source, registered by pylog under {@link #PYTHON_NAME}
 * as well, what it does not do itself:
 * <ul>
 * <li>batch reads whose options this reader handles ({@link ReadOptions#handles}) run here; any other batch
 * read (an option not ported yet) runs the Python source with the same options;</li>
 * <li>streams (micro-batch, continuous) whose options this reader handles run here too; streaming writes go to
 * the Python source's writer ({@link PylogTable});</li>
 * <li>batch writes come here as a V1 {@link CreatableRelationProvider} (the table declares no batch write, so
 * Spark falls back to it for every save mode): {@code append} and Spark's default {@code errorifexists}
 * append through the Python writer, as Kafka's sink does; {@code overwrite} and {@code ignore} fail.</li>
 * </ul>
 */
public final class PylogProvider implements TableProvider, DataSourceRegister, CreatableRelationProvider {
    public static final String NAME = "pylog";
    /** The Python data source's second name, which this provider delegates to (pylog/spark/source.py). */
    public static final String PYTHON_NAME = "pylog-python";

    @Override
    public String shortName() {
        return NAME;
    }

    static PythonDataSourceV2 python() {
        PythonDataSourceV2 py = new PythonDataSourceV2();
        py.setShortName(PYTHON_NAME);
        return py;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (ReadOptions.handles(options) || ReadOptions.handlesStream(options)) {  // no Python worker for these
            return Schemas.kafka(ReadOptions.parse(options, null).includeHeaders);
        }
        return python().inferSchema(options);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true; // a declared subset of the columns is a pruned read; writes pass the data's schema
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new PylogTable(schema, partitioning, properties);
    }

    @Override
    public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
                                       scala.collection.immutable.Map<String, String> parameters, Dataset<Row> data) {
        if (mode == SaveMode.Overwrite || mode == SaveMode.Ignore) {
            throw ReadOptions.bad("mode", "a pylog topic is append-only: use mode('append')");
        }
        data.write().format(PYTHON_NAME).mode(SaveMode.Append).options(CollectionConverters.asJava(parameters)).save();
        StructType schema = data.schema();
        return new BaseRelation() {
            @Override
            public SQLContext sqlContext() {
                return sqlContext;
            }

            @Override
            public StructType schema() {
                return schema;
            }
        };
    }
}
