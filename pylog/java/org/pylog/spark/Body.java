package org.pylog.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The sections of a decompressed batch body (docs/FORMAT.md "Body"), located and bounds-checked once.
 *
 * <p>Invariants: after construction every section lies inside the body and the sizes add up to the body
 * exactly; lengths are at least -1 and the data sections hold exactly the bytes the lengths claim; offset
 * deltas strictly increase from 0 to {@code last_offset_delta}. Accessors then need no further checks.
 */
public final class Body {
    private final ByteBuffer body;
    private final Batch batch;
    public final int n;
    private final int offsetDeltasAt;   // -1 when absent
    private final int timestampDeltasAt; // -1 when absent
    private final int keyLengthsAt;     // -1 when absent
    private final int valueLengthsAt;
    private final int keyDataAt;
    private final int valueDataAt;
    public final int headersAt;         // -1 when absent
    public final int headersEnd;

    public Body(Batch batch, ByteBuffer body, String where) throws FormatException {
        this.body = body.order(ByteOrder.LITTLE_ENDIAN);
        this.batch = batch;
        this.n = batch.recordCount;
        long size = body.remaining();
        int base = body.position();
        long at = 0;
        int a = batch.attributes;
        long n4 = 4L * n;
        offsetDeltasAt = (a & Batch.HAS_OFFSET_DELTAS) != 0 ? (int) at : -1;
        if (offsetDeltasAt >= 0) at += n4;
        timestampDeltasAt = (a & Batch.HAS_TIMESTAMPS) != 0 ? (int) at : -1;
        if ((a & Batch.HAS_TIMESTAMPS) != 0) at += 8L * n;
        keyLengthsAt = (a & Batch.HAS_KEYS) != 0 ? (int) at : -1;
        if (keyLengthsAt >= 0) at += n4;
        valueLengthsAt = (int) Math.min(at, Integer.MAX_VALUE);
        at += n4;
        if (at > size) {
            throw new FormatException(where + ": body of " + size + " bytes too small for the columns of " + n + " records");
        }
        if (offsetDeltasAt >= 0) {
            int prev = -1;
            for (int i = 0; i < n; i++) {
                int d = this.body.getInt(base + offsetDeltasAt + 4 * i);
                if (d <= prev || (i == 0 && d != 0)) {
                    throw new FormatException(where + ": offset deltas do not increase strictly from 0");
                }
                prev = d;
            }
            if (prev != batch.lastOffsetDelta) {
                throw new FormatException(where + ": last offset delta " + prev + ", header says " + batch.lastOffsetDelta);
            }
        }
        long keyBytes = keyLengthsAt >= 0 ? sumLengths(base + keyLengthsAt, where) : 0;
        long valueBytes = sumLengths(base + valueLengthsAt, where);
        keyDataAt = (int) at;
        at += keyBytes;
        valueDataAt = (int) Math.min(at, Integer.MAX_VALUE);
        at += valueBytes;
        if (at > size) {
            throw new FormatException(where + ": key and value data run past the body's end");
        }
        boolean rest = at < size;
        if (rest != ((a & Batch.HAS_HEADERS) != 0)) {
            throw new FormatException(where + (rest ? ": bytes after the value data without a headers section"
                    : ": headers flag set but no headers section"));
        }
        headersAt = rest ? (int) at : -1;
        headersEnd = (int) size;
    }

    private long sumLengths(int at, String where) throws FormatException {
        long total = 0;
        for (int i = 0; i < n; i++) {
            int len = body.getInt(at + 4 * i);
            if (len < -1) {
                throw new FormatException(where + ": record " + i + " has length " + len);
            }
            if (len > 0) total += len;
        }
        return total;
    }

    private int base() {
        return body.position();
    }

    public long offset(int i) {
        return batch.baseOffset + (offsetDeltasAt < 0 ? i : body.getInt(base() + offsetDeltasAt + 4 * i));
    }

    public long timestamp(int i) {
        if ((batch.attributes & Batch.LOG_APPEND_TIME) != 0) return batch.maxTimestamp;
        if (timestampDeltasAt < 0) return batch.firstTimestamp;
        return batch.firstTimestamp + body.getLong(base() + timestampDeltasAt + 8 * i);
    }

    public int timestampType() {
        return (batch.attributes & Batch.LOG_APPEND_TIME) != 0 ? 1 : 0;
    }

    public boolean hasKeys() {
        return keyLengthsAt >= 0;
    }

    public int keyLength(int i) {
        return keyLengthsAt < 0 ? -1 : body.getInt(base() + keyLengthsAt + 4 * i);
    }

    public int valueLength(int i) {
        return body.getInt(base() + valueLengthsAt + 4 * i);
    }

    /** Absolute position in {@link #buffer()} where key data starts. */
    public int keyDataStart() {
        return base() + keyDataAt;
    }

    public int valueDataStart() {
        return base() + valueDataAt;
    }

    /** Absolute position in {@link #buffer()} where value data ends (the headers section, or the body's end). */
    public int valueDataEnd() {
        return base() + (headersAt >= 0 ? headersAt : headersEnd);
    }

    public ByteBuffer buffer() {
        return body;
    }
}
