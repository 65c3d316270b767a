package org.pylog.spark;

import java.util.HashSet;
import java.util.Set;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The Kafka source's schema, which both of pylog's readers produce (pylog/spark/source.py's kafka_schema). */
final class Schemas {
    static final StructType HEADER = new StructType()
            .add("key", DataTypes.StringType)
            .add("value", DataTypes.BinaryType);
    static final ArrayType HEADERS = DataTypes.createArrayType(HEADER);

    private Schemas() {
    }

    static StructType kafka(boolean includeHeaders) {
        StructType s = new StructType()
                .add("key", DataTypes.BinaryType)
                .add("value", DataTypes.BinaryType)
                .add("topic", DataTypes.StringType)
                .add("partition", DataTypes.IntegerType)
                .add("offset", DataTypes.LongType)
                .add("timestamp", DataTypes.TimestampType)
                .add("timestampType", DataTypes.IntegerType);
        return includeHeaders ? s.add("headers", HEADERS) : s;
    }

    /** A declared schema must be a subset of the Kafka schema's columns, with their types, each once. */
    static void checkDeclared(StructType declared, boolean includeHeaders) {
        StructType all = kafka(true);
        Set<String> seen = new HashSet<>();
        for (StructField f : declared.fields()) {
            int i = all.getFieldIndex(f.name()).isDefined() ? all.fieldIndex(f.name()) : -1;
            if (i < 0 || !all.fields()[i].dataType().equals(f.dataType()) || !f.nullable()) {
                String what = i < 0 ? "unknown column '" + f.name() + "'"
                        : "column '" + f.name() + "' must be " + all.fields()[i].dataType().simpleString() + " (nullable)";
                throw new IllegalArgumentException("option 'schema': " + what
                        + ": declare a subset of the pylog source's columns (" + all.simpleString()
                        + "), e.g. .schema('value binary')");
            }
            if (!seen.add(f.name())) {
                throw new IllegalArgumentException("option 'schema': declare each column once, at least one; got "
                        + declared.simpleString());
            }
        }
        if (seen.isEmpty()) {
            throw new IllegalArgumentException("option 'schema': declare each column once, at least one; got "
                    + declared.simpleString());
        }
    }
}
