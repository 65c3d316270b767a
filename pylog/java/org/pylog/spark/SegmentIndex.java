package org.pylog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32C;

/**
 * One segment's offset index ({@code .index}) or time index ({@code .timeindex}), read-only, as docs/FORMAT.md
 * ("Indexes") lays them out: a 64-byte header, column A ({@code capacity} relative offsets, uint32, or
 * timestamps, int64), then column B ({@code capacity} positions or relative offsets, uint32).
 *
 * <p>Invariants: an index is derived data, so one that is missing or fails a check (magic, version, the header's
 * CRC, this segment's base offset, the file's size for its capacity, a sealed file's entries CRC) opens as
 * null and the caller walks the log instead. The entries in use are the prefix of slots whose column B is
 * non-zero (a live file another process is still appending to, whose count field is not kept up to date);
 * its mapping is never cut under the reader, since index files are replaced by rename, never shrunk.
 */
final class SegmentIndex {
    static final int HEADER = 64;
    static final int OFFSETS = 0x4F584C50; // "PLXO", little-endian
    static final int TIMES = 0x54584C50;   // "PLXT"

    private final ByteBuffer map;
    private final int width;     // bytes of a column A entry
    private final int capacity;
    final int count;
    /** The segment's largest timestamp (a sealed time index), else -1. */
    final long maxTimestamp;

    private SegmentIndex(ByteBuffer map, int width, int capacity, int count, long maxTimestamp) {
        this.map = map;
        this.width = width;
        this.capacity = capacity;
        this.count = count;
        this.maxTimestamp = maxTimestamp;
    }

    /** The index {@code file} of the segment at {@code base} ({@link #OFFSETS} or {@link #TIMES}), or null. */
    static SegmentIndex open(Path file, int magic, long base) throws IOException {
        int width = magic == TIMES ? 8 : 4;
        ByteBuffer h;
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < HEADER + width + 4 || size > Integer.MAX_VALUE) return null;
            h = ch.map(FileChannel.MapMode.READ_ONLY, 0, size).order(ByteOrder.LITTLE_ENDIAN);
        } catch (NoSuchFileException e) {
            return null;
        }
        CRC32C c = new CRC32C();
        c.update(h.duplicate().limit(60).position(0));
        long capacity = h.getInt(16) & 0xFFFFFFFFL;
        if (h.getInt(0) != magic || h.getShort(4) != 1 || (int) c.getValue() != h.getInt(60)
                || h.getLong(8) != base || capacity < 1 || HEADER + (width + 4) * capacity != h.capacity()) {
            return null;
        }
        boolean sealed = (h.getShort(6) & 1) != 0;
        int cap = (int) capacity;
        int b = HEADER + width * cap;
        int count;
        if (sealed) {
            count = h.getInt(20);
            if (count < 0 || count > cap) return null;
            CRC32C e = new CRC32C();
            e.update(h.duplicate().limit(HEADER + width * count).position(HEADER));
            e.update(h.duplicate().limit(b + 4 * count).position(b));
            if ((int) e.getValue() != h.getInt(24)) return null;
        } else {
            int lo = 0;
            int hi = cap; // used slots are a prefix: column B is non-zero exactly for them
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (h.getInt(b + 4 * mid) != 0) lo = mid + 1;
                else hi = mid;
            }
            count = lo;
        }
        long maxTs = magic == TIMES && sealed ? h.getLong(28) : -1;
        return new SegmentIndex(h, width, cap, count, maxTs);
    }

    /** Column A of entry {@code i}: a relative offset (offset index) or a timestamp (time index). */
    long a(int i) {
        return width == 8 ? map.getLong(HEADER + 8 * i) : map.getInt(HEADER + 4 * i) & 0xFFFFFFFFL;
    }

    /** Column B of entry {@code i}: a position (offset index) or a relative offset (time index). */
    long b(int i) {
        return map.getInt(HEADER + width * capacity + 4 * i) & 0xFFFFFFFFL;
    }

    /** The number of entries whose column A is below {@code value} (a bisection; column A strictly increases). */
    int below(long value) {
        int lo = 0;
        int hi = count;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (a(mid) < value) lo = mid + 1;
            else hi = mid;
        }
        return lo;
    }
}
