package org.pylog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One task's read of offsets {@code [from, until)} of a partition, as Spark columnar batches of at most
 * {@link #ROWS} rows, straight from the segment files.
 *
 * <p>Invariants: rows come out in offset order, each once, only offsets inside the range; only the columns
 * of the read schema are decoded (none at all for {@code count(*)}: record counts come from batch headers
 * when a batch lies wholly inside the range); every batch's CRC is checked before any of its bytes is used;
 * control batches (transaction markers) yield no row, as in the Python reader.
 *
 * <p>Data loss while reading, as in the Python reader's {@code read_range}: offsets of the range that retention
 * or delete-records removed after planning (the partition's log start is looked at when the read starts, at
 * each segment it enters and every {@link #CHECK_RECORDS} records, as often as the Python reader asks for the
 * log start), and a log that ends before the range does (truncated or recreated), fail the task with the
 * Python reader's message under {@code failOnDataLoss=true}; otherwise they are skipped with a warning.
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    /** Records read between two looks at the log start within a segment (the Python reader's READ_RECORDS). */
    static final int CHECK_RECORDS = 100_000;

    // The read schema's columns as codes: a switch on them per cell, not on their names.
    private static final int KEY = 0;
    private static final int VALUE = 1;
    private static final int TOPIC = 2;
    private static final int PARTITION = 3;
    private static final int OFFSET = 4;
    private static final int TIMESTAMP = 5;
    private static final int TIMESTAMP_TYPE = 6;
    private static final int HEADERS = 7;
    private static final String[] NAMES = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
        "headers"};

    private final PylogInputPartition range;
    private final Path dir;
    private final PartitionLog.Cursor cursor;
    private long from;        // range.from, raised past offsets found removed (failOnDataLoss=false)
    private long pos;         // the next offset not read yet
    private ByteBuffer segment; // the mapping of the segment the last batch came from
    private long sinceCheck;  // records passed since the last look at the log start
    private final int[] columns;
    private final WritableColumnVector[] vectors;
    private final ColumnarBatch out;
    /** The offset of each row of {@link #out} (the continuous reader's progress, row by row). */
    private final long[] rowOffsets = new long[ROWS];
    /** The key (or value) lengths of the rows {@link #fill} puts, one column at a time. */
    private final int[] lengths = new int[ROWS];
    private final byte[] topicBytes;
    private final byte[][] scratch = new byte[1][];
    private final boolean needsBody;
    private final boolean needsHeaders;
    private final boolean needsKeys;
    private final boolean needsValues;
    private byte[] keyCopy = new byte[0];
    private byte[] valueCopy = new byte[0];

    private PartitionLog.Located current;
    private Body body;
    private byte[] keyArray;  // the key and value data of the current batch (the body itself when on the heap)
    private byte[] valueArray;
    private int row;          // next record of the current batch
    private long keyPos;      // positions in keyArray / valueArray of the next key / value data
    private long valuePos;
    private java.util.List<Object[]>[] headerRows;

    ColumnarReader(PylogInputPartition range, StructType schema) {
        this.range = range;
        this.dir = Paths.get(range.store, range.topic, Integer.toString(range.partition));
        this.from = this.pos = range.from;
        try {
            PartitionLog log = PartitionLog.open(dir);
            checkLogStart(log.logStartOffset());
            this.cursor = log.cursor(from, range.until);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        StructField[] fields = schema.fields();
        columns = new int[fields.length];
        for (int i = 0; i < fields.length; i++) {
            columns[i] = java.util.Arrays.asList(NAMES).indexOf(fields[i].name());
            if (columns[i] < 0) throw new IllegalStateException("unknown column " + fields[i].name());
        }
        boolean body = false;
        boolean headers = false;
        boolean keys = false;
        boolean values = false;
        for (int c : columns) {
            body |= c != TOPIC && c != PARTITION;
            headers |= c == HEADERS;
            keys |= c == KEY;
            values |= c == VALUE;
        }
        needsBody = body;
        needsHeaders = headers;
        needsKeys = keys;
        needsValues = values;
        vectors = OnHeapColumnVector.allocateColumns(ROWS, schema);
        out = new ColumnarBatch(vectors);
        topicBytes = range.topic.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public boolean next() throws IOException {
        for (WritableColumnVector v : vectors) v.reset();
        int n = 0;
        while (n < ROWS) {
            if (current == null && !advance()) {
                break;
            }
            if (needsBody) {
                if (body == null) openBody();
                n = fill(n);
            } else {
                n = countOnly(n);
            }
            if (row >= current.batch().recordCount) current = null;
        }
        out.setNumRows(n);
        return n > 0;
    }

    private boolean advance() throws IOException {
        body = null;
        row = 0;
        while (true) {
            current = pos < range.until ? cursor.next() : null;
            if (current == null) {
                checkLogEnd();
                return false;
            }
            Batch b = current.batch();
            if (current.file() != segment || sinceCheck >= CHECK_RECORDS) {
                // the first segment entered is the one the constructor looked at the log start for, just now
                if (segment != null) checkLogStart(PartitionLog.open(dir).logStartOffset());
                segment = current.file();
                sinceCheck = 0;
            }
            sinceCheck += b.recordCount;
            // a control batch (a transaction's marker) holds no record for readers
            if (!b.isControl() && b.lastOffset() >= from) return true;
        }
    }

    /** Offsets from {@link #pos} below the log start now ({@code start}) were removed after planning: data loss. */
    private void checkLogStart(long start) {
        if (pos < start) {
            DataLoss.report(range.failOnDataLoss, range.topic + "-" + range.partition + ": offsets [" + pos + ", "
                    + Math.min(start, range.until) + ") were removed before they were read (the log now starts at "
                    + start + ")");
            from = pos = Math.max(pos, start);
        }
    }

    /** The read ended before the range's end: if the log ends there too, it was truncated or recreated. */
    private void checkLogEnd() throws IOException {
        if (pos >= range.until || cursor.end() >= range.until) return; // passed batches reach the end (gaps, markers)
        long end = PartitionLog.open(dir).logEndOffset();
        if (end < range.until) {
            DataLoss.report(range.failOnDataLoss, range.topic + "-" + range.partition + ": the log ends at " + end
                    + ", before offset " + range.until + " that the query planned to read up to");
        }
        pos = range.until;
    }

    private void openBody() throws IOException {
        Batch b = current.batch();
        ByteBuffer buf = b.body(current.file(), current.at(), scratch, current.where());
        body = new Body(b, buf, current.where());
        int ks = body.keyDataStart();
        int vs = body.valueDataStart();
        if (buf.hasArray()) {
            keyArray = valueArray = buf.array();
            keyPos = buf.arrayOffset() + (long) ks;
            valuePos = buf.arrayOffset() + (long) vs;
        } else {   // a mapped file: copy only the sections the read schema needs
            if (needsKeys) {
                keyCopy = section(buf, ks, vs, keyCopy);
                keyArray = keyCopy;
            }
            if (needsValues) {
                valueCopy = section(buf, vs, body.valueDataEnd(), valueCopy);
                valueArray = valueCopy;
            }
            keyPos = 0;
            valuePos = 0;
        }
        headerRows = needsHeaders && body.headersAt >= 0 ? decodeHeaders() : null;
    }

    /** Bytes [from, to) of {@code buf} in {@code into} (grown when too small), from its index 0. */
    private static byte[] section(ByteBuffer buf, int from, int to, byte[] into) {
        int size = to - from;
        byte[] out = into.length >= size ? into : new byte[Math.max(size, into.length * 2)];
        buf.duplicate().position(from).get(out, 0, size);
        return out;
    }

    @SuppressWarnings("unchecked")
    private java.util.List<Object[]>[] decodeHeaders() throws FormatException {
        java.util.List<Object[]>[] rows = (java.util.List<Object[]>[]) new java.util.List<?>[body.n];
        Headers.decode(body, (record, key, buf, valueAt, len) -> {
            if (rows[record] == null) rows[record] = new java.util.ArrayList<>();
            byte[] v = null;
            if (valueAt >= 0) {
                v = new byte[len];
                buf.duplicate().position(valueAt).get(v);
            }
            rows[record].add(new Object[] {key.getBytes(StandardCharsets.UTF_8), v});
        }, current.where());
        return rows;
    }

    /** Rows without any body column (topic, partition or nothing): counts from offsets, no decoding needed
     *  when the batch lies wholly inside the range. */
    private int countOnly(int n) throws IOException {
        Batch b = current.batch();
        boolean inside = b.baseOffset >= from && b.lastOffset() < range.until
                && (b.attributes & Batch.HAS_OFFSET_DELTAS) == 0;
        if (!inside) {
            if (body == null) openBody();
            return fill(n);
        }
        int take = Math.min(ROWS - n, b.recordCount - row);
        for (int i = 0; i < take; i++) rowOffsets[n + i] = b.baseOffset + row + i; // no deltas: offsets are dense
        for (int c = 0; c < columns.length; c++) {
            WritableColumnVector v = vectors[c];
            if (columns[c] == PARTITION) {
                v.putInts(n, take, range.partition);
            } else {
                for (int i = 0; i < take; i++) v.putByteArray(n + i, topicBytes);
            }
        }
        row += take;
        if (row >= b.recordCount) pos = b.lastOffset() + 1;
        return n + take;
    }

    /** Rows of the current batch into the vectors from index {@code n}, column by column: those from {@link #from}
     *  on and below the range's end (offsets increase along a batch, so they are one run of its rows), at most as
     *  many as the columnar batch has room for. */
    private int fill(int n) {
        int first = row;
        while (first < body.n && body.offset(first) < from) { // before the range: only their data is passed
            if (needsKeys) keyPos += Math.max(0, body.keyLength(first));
            if (needsValues) valuePos += Math.max(0, body.valueLength(first));
            first++;
        }
        int last = first;
        int limit = Math.min(body.n, first + ROWS - n);
        while (last < limit && body.offset(last) < range.until) last++;
        int count = last - first;
        for (int k = 0; k < count; k++) rowOffsets[n + k] = body.offset(first + k);
        for (int c = 0; c < columns.length; c++) {
            WritableColumnVector v = vectors[c];
            switch (columns[c]) {
                case KEY -> keyPos = putBinary(v, n, first, count, true, keyArray, keyPos);
                case VALUE -> valuePos = putBinary(v, n, first, count, false, valueArray, valuePos);
                case TOPIC -> {
                    for (int k = 0; k < count; k++) v.putByteArray(n + k, topicBytes);
                }
                case PARTITION -> v.putInts(n, count, range.partition);
                case OFFSET -> {
                    for (int k = 0; k < count; k++) v.putLong(n + k, rowOffsets[n + k]);
                }
                case TIMESTAMP -> {
                    for (int k = 0; k < count; k++) v.putLong(n + k, body.timestamp(first + k) * 1000L);
                }
                case TIMESTAMP_TYPE -> v.putInts(n, count, body.timestampType());
                default -> {
                    for (int k = 0; k < count; k++) putHeaders(v, n + k, first + k);
                }
            }
        }
        if (count > 0) pos = rowOffsets[n + count - 1] + 1;
        row = last < body.n && body.offset(last) >= range.until ? body.n : last; // past the range's end: done
        return n + count;
    }

    /**
     * Rows {@code [first, first + count)} of the key column (or the value column) into {@code v} from index
     * {@code n}: their bytes, back to back from {@code at} in {@code data}, appended to the vector in one copy,
     * each row pointing at its own (what {@code putByteArray} does row by row). Returns where the next row's
     * bytes start in {@code data}.
     */
    private long putBinary(WritableColumnVector v, int n, int first, int count, boolean keys, byte[] data, long at) {
        int total = 0;
        for (int k = 0; k < count; k++) {
            int len = keys ? body.keyLength(first + k) : body.valueLength(first + k);
            lengths[k] = len;
            if (len > 0) total += len;
        }
        int base = v.arrayData().appendBytes(total, data, (int) at);
        int rel = 0;
        for (int k = 0; k < count; k++) {
            int len = lengths[k];
            if (len < 0) {
                v.putNull(n + k);
            } else {
                v.putArray(n + k, base + rel, len);
                rel += len;
            }
        }
        return at + total;
    }

    private void putHeaders(WritableColumnVector v, int n, int record) {
        java.util.List<Object[]> hs = headerRows == null ? null : headerRows[record];
        WritableColumnVector elems = v.arrayData();
        int start = elems.getElementsAppended();
        int count = hs == null ? 0 : hs.size();
        if (count == 0) {
            v.putNull(n); // null for a record without headers, as the Kafka source (and the Python reader) gives
            return;
        }
        {
            WritableColumnVector keys = elems.getChild(0);
            WritableColumnVector values = elems.getChild(1);
            for (Object[] h : hs) {
                elems.appendStruct(false);
                byte[] k = (byte[]) h[0];
                keys.appendByteArray(k, 0, k.length);
                byte[] val = (byte[]) h[1];
                if (val == null) values.appendNull();
                else values.appendByteArray(val, 0, val.length);
            }
        }
        v.putArray(n, start, count);
    }

    @Override
    public ColumnarBatch get() {
        return out;
    }

    /** The offset of row {@code i} of the batch {@link #get} returned last. */
    long offsetOf(int i) {
        return rowOffsets[i];
    }

    @Override
    public void close() {
        out.close();
    }
}
