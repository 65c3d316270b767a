package org.pylog.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.zip.CRC32C;

import net.jpountz.lz4.LZ4Factory;
import net.jpountz.lz4.LZ4SafeDecompressor;

/**
 * One record batch of a {@code .log} file, as docs/FORMAT.md ("Record batch") specifies it: the 64-byte header,
 * its validation, and the decoded body's columns.
 *
 * <p>Invariants: a header is trusted only after {@link #checkHeader} (every bound of the spec's "Validation"
 * section that the header alone decides); a body only after its CRC-32C matched and its sections added up to
 * {@code body_size} exactly ({@link #decode}). Nothing is allocated before the bound that limits its size was
 * checked, so a hostile header costs at most the bytes present.
 */
public final class Batch {
    public static final int HEADER_SIZE = 64;
    /** Bytes before {@code batch_length}'s end: a batch's total size is {@code batch_length + 12}. */
    public static final int LENGTH_PREFIX = 12;
    public static final int MAGIC = 1;
    public static final int MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_PREFIX;
    public static final long MAX_BATCH_SIZE = (1L << 31) - 1;

    public static final int CODEC_MASK = 0x7;
    public static final int CODEC_NONE = 0;
    public static final int CODEC_LZ4 = 1;
    public static final int LOG_APPEND_TIME = 1 << 3;
    public static final int TRANSACTIONAL = 1 << 4;
    public static final int CONTROL = 1 << 5;
    public static final int HAS_KEYS = 1 << 6;
    public static final int HAS_TIMESTAMPS = 1 << 7;
    public static final int HAS_HEADERS = 1 << 8;
    public static final int HAS_OFFSET_DELTAS = 1 << 9;
    public static final int KNOWN_BITS = 0x3FF;

    private static final LZ4SafeDecompressor LZ4 = LZ4Factory.fastestInstance().safeDecompressor();

    // Header fields.
    public final long baseOffset;
    public final int batchLength;
    public final int crc;
    public final int attributes;
    public final int lastOffsetDelta;
    public final long firstTimestamp;
    public final long maxTimestamp;
    public final long producerId;
    public final short producerEpoch;
    public final int baseSequence;
    public final int recordCount;
    public final long bodySize;

    private Batch(ByteBuffer h, int at) {
        baseOffset = h.getLong(at);
        batchLength = h.getInt(at + 8);
        crc = h.getInt(at + 13);
        attributes = h.getShort(at + 17) & 0xFFFF;
        lastOffsetDelta = h.getInt(at + 19);
        firstTimestamp = h.getLong(at + 23);
        maxTimestamp = h.getLong(at + 31);
        producerId = h.getLong(at + 39);
        producerEpoch = h.getShort(at + 47);
        baseSequence = h.getInt(at + 49);
        recordCount = h.getInt(at + 53);
        bodySize = h.getInt(at + 57) & 0xFFFFFFFFL;
    }

    /** Total bytes of the batch in the file: header and stored body. */
    public long totalSize() {
        return (batchLength & 0xFFFFFFFFL) + LENGTH_PREFIX;
    }

    public long storedBodySize() {
        return totalSize() - HEADER_SIZE;
    }

    public long lastOffset() {
        return baseOffset + lastOffsetDelta;
    }

    public int codec() {
        return attributes & CODEC_MASK;
    }

    public boolean isControl() {
        return (attributes & CONTROL) != 0;
    }

    public boolean isTransactional() {
        return (attributes & TRANSACTIONAL) != 0;
    }

    /**
     * Reads and checks the header at {@code at} of {@code buf} (little-endian, at least 64 bytes there).
     *
     * @param fileRemaining bytes of the visible file from {@code at} on: the batch must fit in them
     * @param where the file and position, for messages
     * @return the header, or null when the batch does not fit in {@code fileRemaining} (a torn or unfinished tail)
     * @throws FormatException a header the spec refuses
     */
    public static Batch readHeader(ByteBuffer buf, int at, long fileRemaining, String where) throws FormatException {
        Batch b = new Batch(buf.order(ByteOrder.LITTLE_ENDIAN), at);
        int magic = buf.get(at + 12) & 0xFF;
        if (magic != MAGIC) {
            throw new FormatException(where + ": magic " + magic + ", expected " + MAGIC);
        }
        long length = b.batchLength & 0xFFFFFFFFL;
        if (length < MIN_BATCH_LENGTH) {
            throw new FormatException(where + ": batch_length " + length + " below " + MIN_BATCH_LENGTH);
        }
        if (length + LENGTH_PREFIX > MAX_BATCH_SIZE) {
            throw new FormatException(where + ": batch of " + (length + LENGTH_PREFIX) + " bytes, above 2^31-1");
        }
        if (length + LENGTH_PREFIX > fileRemaining) {
            return null;
        }
        b.checkHeader(where);
        return b;
    }

    private void checkHeader(String where) throws FormatException {
        if ((attributes & ~KNOWN_BITS) != 0) {
            throw new FormatException(where + ": unknown attribute bits 0x" + Integer.toHexString(attributes));
        }
        int codec = codec();
        long stored = storedBodySize();
        if (codec == CODEC_NONE) {
            if (bodySize != stored) {
                throw new FormatException(where + ": body_size " + bodySize + " but " + stored + " bytes stored");
            }
        } else if (codec == CODEC_LZ4) {
            if (bodySize > 256 * stored + 64 || bodySize > MAX_BATCH_SIZE) {
                throw new FormatException(where + ": lz4 body_size " + bodySize + " for " + stored + " stored bytes");
            }
        } else {
            throw new FormatException(where + ": unknown codec " + codec);
        }
        if (recordCount < 1 || recordCount > bodySize / 4) {
            throw new FormatException(where + ": record_count " + recordCount + " for body_size " + bodySize);
        }
        if (lastOffsetDelta < recordCount - 1) {
            throw new FormatException(where + ": last_offset_delta " + lastOffsetDelta + " below record_count - 1");
        }
        if ((attributes & HAS_OFFSET_DELTAS) == 0 && lastOffsetDelta != recordCount - 1) {
            throw new FormatException(where + ": last_offset_delta " + lastOffsetDelta
                    + " without an offset-delta column for " + recordCount + " records");
        }
        if (maxTimestamp < firstTimestamp) {
            throw new FormatException(where + ": max_timestamp below first_timestamp");
        }
        if (baseOffset < 0 || baseOffset > Long.MAX_VALUE - lastOffsetDelta) {
            throw new FormatException(where + ": base_offset " + baseOffset + " out of range");
        }
    }

    /** CRC-32C of bytes [0, 8) then [17, total) of the batch at {@code at}, against the header's. */
    public void checkCrc(ByteBuffer buf, int at, String where) throws FormatException {
        CRC32C c = new CRC32C();
        ByteBuffer d = buf.duplicate();
        d.limit(at + 8).position(at);
        c.update(d);
        d.limit(at + (int) totalSize()).position(at + 17);
        c.update(d);
        if ((int) c.getValue() != crc) {
            throw new FormatException(where + ": CRC mismatch (stored 0x" + Integer.toHexString(crc)
                    + ", computed 0x" + Long.toHexString(c.getValue()) + ")");
        }
    }

    /**
     * The batch's body, decompressed (a view of {@code buf} when stored uncompressed).
     *
     * @param scratch a buffer reused for lz4 bodies, or null; a larger one is made when needed
     */
    public ByteBuffer body(ByteBuffer buf, int at, byte[][] scratch, String where) throws FormatException {
        ByteBuffer d = buf.duplicate().order(ByteOrder.LITTLE_ENDIAN);
        d.limit(at + (int) totalSize()).position(at + HEADER_SIZE);
        ByteBuffer stored = d.slice().order(ByteOrder.LITTLE_ENDIAN);
        if (codec() == CODEC_NONE) {
            return stored;
        }
        int size = (int) bodySize;
        byte[] out = scratch != null && scratch[0] != null && scratch[0].length >= size ? scratch[0] : new byte[size];
        if (scratch != null) {
            scratch[0] = out;
        }
        ByteBuffer dst = ByteBuffer.wrap(out, 0, size);
        int n;
        try {
            n = LZ4.decompress(stored, stored.position(), stored.remaining(), dst, 0, size);
        } catch (RuntimeException e) {
            throw new FormatException(where + ": lz4 body does not decompress: " + e.getMessage());
        }
        if (n != size) {
            throw new FormatException(where + ": lz4 body decompressed to " + n + " bytes, body_size " + size);
        }
        return ByteBuffer.wrap(out, 0, size).slice().order(ByteOrder.LITTLE_ENDIAN);
    }
}
