package org.pylog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32C;

/**
 * One partition directory of a store, read-only: its segments by base offset, its log start offset (from
 * {@code partition.checkpoint}) and a scan of the batches that hold an offset range.
 *
 * <p>Invariants (the format's visibility rule, docs/ARCHITECTURE.md invariant 2): a batch is returned only when
 * it lies wholly inside the file as mapped and its CRC-32C matches; at the end of the last segment a batch
 * that does not fit yet, or whose bytes are still being written (its CRC does not match and it ends exactly at
 * the mapped end), ends the visible log instead of failing, since the partition's writer may be in the middle
 * of it. Anywhere else a bad batch raises {@link FormatException}. Offsets come out strictly increasing.
 * No lock is taken: closed segments are immutable, and the writer only appends.
 */
public final class PartitionLog {
    static final String LOG_SUFFIX = ".log";
    static final int CHECKPOINT_SIZE = 40;

    private final Path dir;
    private final long[] bases;
    private final long logStartOffset;

    private PartitionLog(Path dir, long[] bases, long logStartOffset) {
        this.dir = dir;
        this.bases = bases;
        this.logStartOffset = logStartOffset;
    }

    /** Opens {@code <store>/<topic>/<partition>}; a missing directory is an empty log. */
    public static PartitionLog open(Path dir) throws IOException {
        List<Long> found = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*" + LOG_SUFFIX)) {
            for (Path p : ds) {
                String name = p.getFileName().toString();
                String stem = name.substring(0, name.length() - LOG_SUFFIX.length());
                if (stem.length() == 20 && stem.chars().allMatch(Character::isDigit)) {
                    found.add(Long.parseLong(stem));
                }
            }
        } catch (NoSuchFileException e) {
            return new PartitionLog(dir, new long[0], 0);
        }
        long[] bases = found.stream().mapToLong(Long::longValue).sorted().toArray();
        long start = readLogStart(dir.resolve("partition.checkpoint"));
        if (start < 0) {
            start = bases.length > 0 ? bases[0] : 0;
        }
        return new PartitionLog(dir, bases, start);
    }

    /** The checkpoint's log start offset, or -1 when there is no checkpoint. */
    static long readLogStart(Path file) throws IOException {
        byte[] b;
        try {
            b = Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            return -1;
        }
        ByteBuffer h = ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN);
        if (b.length != CHECKPOINT_SIZE || b[0] != 'P' || b[1] != 'L' || b[2] != 'C' || b[3] != 'K' || h.getShort(4) != 1) {
            throw new FormatException(file + ": not a version-1 partition checkpoint (PLCK, 40 bytes)");
        }
        CRC32C c = new CRC32C();
        c.update(b, 0, 36);
        if ((int) c.getValue() != h.getInt(36)) {
            throw new FormatException(file + ": checkpoint CRC mismatch");
        }
        return h.getLong(16);
    }

    public long logStartOffset() {
        return logStartOffset;
    }

    public long[] segmentBases() {
        return bases.clone();
    }

    /** The bytes of the segment files now (a segment removed since {@link #open} counts nothing). */
    public long segmentBytes() throws IOException {
        long total = 0;
        for (long base : bases) {
            try {
                total += Files.size(segmentFile(base));
            } catch (NoSuchFileException e) {
                // retention removed it after the listing
            }
        }
        return total;
    }

    Path segmentFile(long base) {
        return dir.resolve(String.format("%020d", base) + LOG_SUFFIX);
    }

    /** A visible batch: its header, the mapped file holding it and its position there. */
    public record Located(Batch batch, ByteBuffer file, int at, String where) {
    }

    /**
     * A cursor over the visible batches holding an offset in {@code [from, until)}, in order; each batch's CRC
     * is checked before it is returned. The walk starts at the batch the offset index of {@code from}'s segment
     * names last at or before it (see {@link #seekPosition}); batches from there wholly below {@code from} are
     * skipped by their headers alone (and, for a timestamp lookup, batches whose {@code max_timestamp} is below
     * the one looked for).
     */
    public Cursor cursor(long from, long until) throws IOException {
        Cursor c = new Cursor(from, until, Long.MIN_VALUE);
        int s = segmentOf(from);
        if (s >= 0 && from > bases[s]) {
            c.startAt = seekPosition(bases[s], from - bases[s], s + 1 < bases.length ? bases[s + 1] : Long.MAX_VALUE);
        }
        return c;
    }

    /** The index in {@link #bases} of the segment holding {@code offset} (the first one below it: -1 if none). */
    private int segmentOf(long offset) {
        int i = Arrays.binarySearch(bases, offset);
        return i >= 0 ? i : -i - 2;
    }

    /**
     * The first offset from the log start whose record timestamp is {@code >= timestamp}, or -1 if there is
     * none (the Python reader's {@code offset_for_timestamp}, segment by segment as it goes). A segment whose
     * sealed time index says its largest timestamp is below it is passed without reading its log. In the
     * others the time index (docs/FORMAT.md, "Indexes") names the last batch after which every record before
     * is older (its greatest entry below {@code timestamp}), the offset index that batch's position, and the
     * walk starts there: batches whose {@code max_timestamp} is below it are passed by their headers alone
     * (those past the index's last entry too), and the batch that holds the answer is CRC-checked and decoded.
     * A missing or damaged index, or one whose position does not hold the batch it names, only costs the
     * walk from the segment's start.
     */
    public long offsetForTimestamp(long timestamp) throws IOException {
        for (int s = 0; s < bases.length; s++) {
            long base = bases[s];
            long next = s + 1 < bases.length ? bases[s + 1] : Long.MAX_VALUE;
            if (next <= logStartOffset) continue;
            SegmentIndex ti = SegmentIndex.open(indexFile(base, ".timeindex"), SegmentIndex.TIMES, base);
            if (ti != null && ti.maxTimestamp >= 0 && ti.maxTimestamp < timestamp) continue;
            long from = Math.max(logStartOffset, base);
            Cursor c = new Cursor(from, next, timestamp);
            int entry = ti == null ? 0 : ti.below(timestamp);
            if (entry > 0) c.startAt = seekPosition(base, ti.b(entry - 1), next);
            for (Located l = c.next(); l != null; l = c.next()) {
                Batch b = l.batch();
                Body body = new Body(b, b.body(l.file(), l.at(), null, l.where()), l.where());
                for (int i = 0; i < body.n; i++) {
                    long off = body.offset(i);
                    if (off >= logStartOffset && body.timestamp(i) >= timestamp) return off;
                }
            }
        }
        return -1;
    }

    /**
     * The position in segment {@code base} of the batch at relative offset {@code rel} or of the last one the
     * offset index names before it; 0 (the segment's start) when the index has no such entry or the batch at
     * that position is not the one the index names (its header read and checked; its CRC is the walk's, which
     * checks every batch it returns, so the batch is not read twice).
     */
    private long seekPosition(long base, long rel, long next) throws IOException {
        SegmentIndex oi = SegmentIndex.open(indexFile(base, ".index"), SegmentIndex.OFFSETS, base);
        int entry = oi == null ? 0 : oi.below(rel + 1);
        if (entry == 0) return 0;
        long at = oi.b(entry - 1);
        try {
            Cursor c = new Cursor(base + oi.a(entry - 1), next, Long.MIN_VALUE);
            c.startAt = at;
            c.headersOnly = true; // the walk that starts here checks the CRC of every batch it returns
            Located first = c.next();
            if (first != null && first.at() == at && first.batch().baseOffset == base + oi.a(entry - 1)) return at;
        } catch (FormatException e) {
            // the index is wrong about this segment: walk it from its start
        }
        return 0;
    }

    /** See {@link #cursor}. Not thread-safe; holds at most one segment's mapping at a time. */
    public final class Cursor {
        private final long from;
        private final long until;
        private final long minTimestamp;
        /** Where in the first segment opened the walk starts (a batch's position), instead of byte 0. */
        long startAt;
        /** Batches are returned with their headers checked but not their CRC: only to locate a batch, never to
         *  read one ({@link #seekPosition}). */
        boolean headersOnly;
        private int segment;
        private ByteBuffer map;
        private Path file;
        private int at;
        private boolean done;
        private long end;

        Cursor(long from, long until, long minTimestamp) {
            this.from = from;
            this.until = until;
            this.minTimestamp = minTimestamp;
            this.segment = Math.max(0, segmentOf(from)) - 1;
            this.end = Math.max(from, logStartOffset);
        }

        /** The offset after the last visible batch passed so far (the log end once {@link #next} gave null). */
        public long end() {
            return end;
        }

        /** The next visible batch, or null at the range's or the visible log's end. */
        public Located next() throws IOException {
            while (!done) {
                if (map == null || at + Batch.HEADER_SIZE > map.capacity()) {
                    if (map != null && at != map.capacity() && segment < bases.length - 1) {
                        throw new FormatException(file + " at byte " + at + ": " + (map.capacity() - at)
                                + " bytes after the last batch");
                    }
                    if (!openNext()) {
                        done = true;
                        return null;
                    }
                    continue;
                }
                boolean last = segment == bases.length - 1;
                int size = map.capacity();
                String where = file + " at byte " + at;
                Batch b = Batch.readHeader(map, at, size - at, where);
                if (b == null) {
                    if (last) {
                        done = true;
                        return null;
                    }
                    throw new FormatException(where + ": batch runs past the end of a sealed segment");
                }
                int here = at;
                if (b.lastOffset() < from || b.maxTimestamp < minTimestamp) {
                    end = Math.max(end, b.lastOffset() + 1);
                    at += (int) b.totalSize();
                    continue;
                }
                if (b.baseOffset >= until) {
                    done = true;
                    return null;
                }
                try {
                    if (!headersOnly) b.checkCrc(map, here, where);
                } catch (FormatException e) {
                    if (last && here + b.totalSize() == size) {
                        done = true; // the writer's batch still being written
                        return null;
                    }
                    throw e;
                }
                end = b.lastOffset() + 1;
                at += (int) b.totalSize();
                return new Located(b, map, here, where);
            }
            return null;
        }

        private boolean openNext() throws IOException {
            while (++segment < bases.length) {
                if (segment > 0) {
                    end = Math.max(end, bases[segment]);
                }
                if (bases[segment] >= until) {
                    return false;
                }
                file = segmentFile(bases[segment]);
                try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                    long size = ch.size();
                    map = size == 0 ? ByteBuffer.allocate(0) : ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
                } catch (NoSuchFileException e) {
                    continue; // retention removed it after the listing: the next segment goes on
                }
                map.order(ByteOrder.LITTLE_ENDIAN);
                at = (int) Math.min(startAt, map.capacity());
                startAt = 0;
                return true;
            }
            return false;
        }
    }

    /**
     * The offset after the last visible batch (the log end offset a reader sees now). The walk over the last
     * segment starts at the batch its offset index names last (docs/FORMAT.md, "Indexes"), so only the batches
     * after it are read and CRC-checked; an index that is missing, damaged or wrong (derived data) only costs
     * the walk from the segment's start.
     */
    public long logEndOffset() throws IOException {
        if (bases.length == 0) {
            return logStartOffset;
        }
        long base = bases[bases.length - 1];
        long[] entry = lastIndexEntry(base);
        if (entry != null) {
            try {
                Cursor c = new Cursor(base + entry[0], Long.MAX_VALUE, Long.MIN_VALUE);
                c.startAt = entry[1];
                Located first = c.next();
                if (first != null && first.batch().baseOffset == base + entry[0]) {
                    while (c.next() != null) {
                        // each batch's CRC is checked on the way: the end is where the last whole, checked batch ends
                    }
                    return Math.max(logStartOffset, c.end());
                }
            } catch (FormatException e) {
                // the index is wrong about this segment: walk it from its start
            }
        }
        Cursor c = cursor(base, Long.MAX_VALUE);
        while (c.next() != null) {
            // as above
        }
        return Math.max(logStartOffset, c.end());
    }

    /** {relative offset, position} of the last used entry of segment {@code base}'s offset index, or null. */
    long[] lastIndexEntry(long base) throws IOException {
        SegmentIndex oi = SegmentIndex.open(indexFile(base, ".index"), SegmentIndex.OFFSETS, base);
        if (oi == null || oi.count == 0) return null;
        return new long[] {oi.a(oi.count - 1), oi.b(oi.count - 1)};
    }

    private Path indexFile(long base, String suffix) {
        return dir.resolve(String.format("%020d", base) + suffix);
    }
}
