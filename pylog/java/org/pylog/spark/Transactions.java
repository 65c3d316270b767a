package org.pylog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * {@code kafka.isolation.level=read_committed} on the JVM, from a partition's files alone, as
 * pylog/storage/log/txn.py (the reference) reads them: the last stable offset (LSO) and the aborted
 * transactions of a range (docs/FORMAT.md, "Transactions", "Producer snapshot", "Aborted-transaction index").
 *
 * <p>Invariants (those of txn.py):
 * <ul>
 * <li>The LSO is the first offset of the earliest open transaction, else the log end, never below the log start.
 *     A {@link Tracker} computes it from {@code producer.snapshot} (ignored when missing, damaged or past the
 *     end: then from the log start) and the batch headers after the snapshot's offset up to the end it is
 *     given, and goes on from the last batch it replayed, so a stream's trigger reads only the headers
 *     appended since the previous one. A producer's transactional batch opens its transaction, a control batch
 *     closes it; batches of an older producer epoch than the producer's are passed over (fenced when written).
 * <li>{@link #abortedIn} gives the entries of the segments' {@code .txnindex} files that cover a range,
 *     stopping at the first entry whose LSO is at or past the range's end (Kafka's
 *     {@code collectAbortedTransactions}). The reader looks them up before it opens any segment file of the
 *     range: a compaction swap renames a segment's log before its index and a cleaned segment holds no aborted
 *     batch, and retention unlinks a log before its index, so every log it opens afterwards is one whose aborted
 *     batches the entries read cover (or a log that is gone, read as data loss).
 * </ul>
 */
final class Transactions {
    static final String SNAPSHOT = "producer.snapshot";
    static final String INDEX_SUFFIX = ".txnindex";
    static final int MAX_FILE = 64 << 20;   // the Python reader's cap on the snapshot and on an index
    private static final int INDEX_HEADER = 8;
    private static final int INDEX_ENTRY = 36;

    private Transactions() {
    }

    /** The LSO of one partition, kept up to date from its files (see the class comment); not thread-safe. */
    static final class Tracker {
        /** producer id -> {epoch, first offset of its open transaction or -1}. */
        private Map<Long, long[]> producers;
        private long next;           // the offset after the last batch replayed
        private long atBase = -1;    // the segment and position after that batch
        private long atPos;

        /** The LSO now, for a log whose visible end is {@code end} (the log end a reader sees). */
        long lastStableOffset(PartitionLog log, long end) throws IOException {
            if (producers == null || next > end) {   // first use, or the log was cut back under us
                producers = new HashMap<>();
                next = readSnapshot(log.dir(), end, producers);
                atBase = -1;
            }
            if (next < end) replay(log, end);
            long lso = end;
            for (long[] p : producers.values()) {
                if (p[1] >= 0) lso = Math.min(lso, p[1]);
            }
            return Math.max(lso, log.logStartOffset());   // Kafka's clamp: retention may remove an open txn's head
        }

        private void replay(PartitionLog log, long end) throws IOException {
            long[] bases = log.segmentBases();
            int i = Arrays.binarySearch(bases, next);
            for (int s = Math.max(0, i >= 0 ? i : -i - 2); s < bases.length; s++) {
                Path file = log.segmentFile(bases[s]);
                long pos = atBase == bases[s] ? atPos : 0;
                ByteBuffer map;
                try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                    long size = ch.size();
                    map = size == 0 ? ByteBuffer.allocate(0) : ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
                } catch (NoSuchFileException e) {
                    continue;   // removed by retention after the listing: its offsets are below the log start
                }
                map.order(ByteOrder.LITTLE_ENDIAN);
                boolean past = false;
                while (pos + Batch.HEADER_SIZE <= map.capacity()) {
                    Batch b = Batch.readHeader(map, (int) pos, map.capacity() - pos, file + " at byte " + pos);
                    if (b == null || b.baseOffset >= end) {
                        past = true;   // not visible at this end yet: replayed by a later call
                        break;
                    }
                    if (b.lastOffset() >= next) apply(b);
                    pos += b.totalSize();
                }
                atBase = bases[s];
                atPos = pos;
                if (past) break;
            }
            next = end;
        }

        private void apply(Batch b) {
            Transactions.apply(producers, b);
        }
    }

    /** ProducerState.rebuild of one batch header into {@code producers}, for the transaction fields only. */
    static void apply(Map<Long, long[]> producers, Batch b) {
        if (b.producerId < 0) return;
        long[] p = producers.get(b.producerId);
        if (p == null) {
            p = new long[] {b.producerEpoch, -1};
            producers.put(b.producerId, p);
        } else if (b.producerEpoch < p[0]) {
            return;   // a fenced producer's batch: it was refused when written
        }
        p[0] = b.producerEpoch;   // a new epoch keeps the transaction its predecessor left open
        if (b.isControl()) {
            p[1] = -1;
        } else if (b.isTransactional() && p[1] < 0) {
            p[1] = b.baseOffset;
        }
    }

    /**
     * Fills {@code producers} from the partition's producer snapshot and returns the offset it is as of; an
     * empty state and 0 when there is none, or it is damaged or past {@code end} (as the Python reader's
     * {@code load_state}: the headers are then replayed from the log's first segment).
     */
    static long readSnapshot(Path dir, long end, Map<Long, long[]> producers) throws IOException {
        byte[] raw;
        Path file = dir.resolve(SNAPSHOT);
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            if (ch.size() > MAX_FILE) return damaged(file, "larger than 64 MiB", producers);
            raw = Files.readAllBytes(file);
        } catch (NoSuchFileException e) {
            return 0;
        }
        ByteBuffer h = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
        if (raw.length < 12) return damaged(file, "truncated", producers);
        CRC32C crc = new CRC32C();
        crc.update(raw, 0, raw.length - 4);
        if ((int) crc.getValue() != h.getInt(raw.length - 4)) return damaged(file, "checksum mismatch", producers);
        if (raw[0] != 'P' || raw[1] != 'L' || raw[2] != 'P' || raw[3] != 'S' || h.getShort(4) != 1) {
            return damaged(file, "bad magic/version", producers);
        }
        try {
            Object doc = new MsgPack(ByteBuffer.wrap(raw, 8, raw.length - 12)).value(0);
            if (!(doc instanceof Map<?, ?> m) || !(m.get("offset") instanceof Long offset)
                    || !(m.get("producers") instanceof List<?> entries)) {
                throw new FormatException("not a snapshot document");
            }
            for (Object item : entries) {
                if (!(item instanceof List<?> e) || (e.size() != 4 && e.size() != 6)
                        || !(e.get(0) instanceof Long pid) || !(e.get(1) instanceof Long epoch)) {
                    throw new FormatException("not a producer entry");
                }
                long first = -1;
                if (e.size() == 6) {
                    if (!(e.get(4) instanceof Long f) || f < -1) throw new FormatException("not a producer entry");
                    first = f;
                }
                producers.put(pid, new long[] {epoch, first});
            }
            if (offset < 0 || offset > end) {
                producers.clear();   // past the log end: not this log's state
                return 0;
            }
            return offset;
        } catch (FormatException | RuntimeException e) {
            return damaged(file, e.getMessage(), producers);
        }
    }

    private static long damaged(Path file, String why, Map<Long, long[]> producers) {
        producers.clear();
        org.slf4j.LoggerFactory.getLogger(Transactions.class).warn("{}: ignoring the producer snapshot ({}); "
                + "rebuilding from the log", file, why);
        return 0;
    }

    /**
     * {@code {producer id: [{first offset, last offset}, ...]}} of the aborted transactions covering some offset
     * of {@code [start, end)}, from the {@code .txnindex} files of the segments from {@code start}'s on.
     *
     * @throws FormatException an index whose header is not one, or a damaged entry that is not a torn write
     *         (the Python reader's CorruptRecordError)
     */
    static Map<Long, List<long[]>> abortedIn(PartitionLog log, long start, long end) throws IOException {
        Map<Long, List<long[]>> out = new LinkedHashMap<>();
        long[] bases = log.segmentBases();
        int i = Arrays.binarySearch(bases, start);
        // Not bounded by the segments below end: a micro-batch's end may cut an aborted transaction whose abort
        // marker (and so its entry) is in a later segment; the LSO rule below ends the scan.
        for (int s = Math.max(0, i >= 0 ? i : -i - 2); s < bases.length; s++) {
            Path file = log.dir().resolve(String.format("%020d", bases[s]) + INDEX_SUFFIX);
            byte[] raw;
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                ByteBuffer buf = ByteBuffer.allocate((int) Math.min(ch.size(), MAX_FILE));
                while (buf.hasRemaining() && ch.read(buf) >= 0) {
                    // read it whole (up to the cap)
                }
                raw = Arrays.copyOf(buf.array(), buf.position());
            } catch (NoSuchFileException e) {
                continue;   // no abort in this segment (or it is gone with its log: see the class comment)
            }
            boolean active = s == bases.length - 1;
            ByteBuffer h = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
            if (raw.length < INDEX_HEADER || raw[0] != 'P' || raw[1] != 'L' || raw[2] != 'T' || raw[3] != 'I'
                    || h.getShort(4) != 1) {
                if (active && raw.length <= INDEX_HEADER + INDEX_ENTRY) {
                    // Its first write (header and entry, which create it) torn by a crash: a torn write unless
                    // an abort marker follows (txn_index.py's invariants).
                    if (entryAbortAfter(log, -1)) {
                        throw new FormatException(file + ": aborted-transaction index has a torn first write ("
                                + raw.length + " bytes, no header), and an abort marker follows the entries that "
                                + "check (after offset -1): the aborted transactions it holds cannot be told from "
                                + "committed ones");
                    }
                    continue;
                }
                if (raw.length == 0) continue;
                throw new FormatException(file + ": not an aborted-transaction index (magic/version)");
            }
            long after = -1;   // the last offset of the last entry that checks
            int whole = INDEX_HEADER + (raw.length - INDEX_HEADER) / INDEX_ENTRY * INDEX_ENTRY;
            // Torn only as the active segment's torn tail, or else its last whole entry failing its checksum,
            // with no abort marker after the entries that check (pylog/storage/txn_index.py's invariants);
            // anything else is damage, which skipping would turn into aborted records read as committed ones.
            String dropped = whole < raw.length
                    ? "ends in a torn entry (" + (raw.length - whole) + " of " + INDEX_ENTRY + " bytes)" : null;
            if (dropped != null && !active) {
                throw new FormatException(file + " @ byte " + whole + ": aborted-transaction index " + dropped
                        + ": the aborted transactions it held cannot be told from committed ones");
            }
            for (int at = INDEX_HEADER; at < whole; at += INDEX_ENTRY) {
                CRC32C crc = new CRC32C();
                crc.update(raw, at, 32);
                if ((int) crc.getValue() != h.getInt(at + 32)) {
                    if (!active || dropped != null || at + INDEX_ENTRY != whole) {
                        throw new FormatException(file + " @ byte " + at + ": aborted-transaction index entry checksum "
                                + "mismatch: the aborted transactions it holds cannot be told from committed ones");
                    }
                    dropped = "entry checksum mismatch";
                    break;
                }
                long pid = h.getLong(at);
                long first = h.getLong(at + 8);
                long last = h.getLong(at + 16);
                long lso = h.getLong(at + 24);
                after = last;
                if (last >= start && first < end) out.computeIfAbsent(pid, k -> new ArrayList<>()).add(new long[] {first, last});
                if (lso >= end) return out;
            }
            if (dropped != null && entryAbortAfter(log, after)) {
                throw new FormatException(file + ": aborted-transaction index " + dropped + ", and an abort marker "
                        + "follows the entries that check (after offset " + after + "): the aborted transactions it "
                        + "holds cannot be told from committed ones");
            }
        }
        return out;
    }

    /** Whether the active segment holds, past offset {@code after}, an abort marker that ends a transaction with
     *  records in the partition: one the writer wrote an index entry for (txn.py's {@code _entry_abort_after}). A
     *  commit marker says nothing (commits have no entry), nor does an abort of a transaction with no record in the
     *  partition (a coordinator writes markers into every partition added to a transaction): the torn entry may be
     *  a later abort's. Replays the visible batches (through the partition's cursor: a batch still being written
     *  is not a marker yet, and the walk stops at a torn tail) into the producer state from the producer snapshot,
     *  or from the log's start when the snapshot is past {@code after}. Only for a dropped last entry (rare: the
     *  writer drops it when it loads its producer state or rolls). */
    private static boolean entryAbortAfter(PartitionLog log, long after) throws IOException {
        long[] bases = log.segmentBases();
        long active = bases[bases.length - 1];
        if (!abortAfter(log, Math.max(after + 1, active))) return false;   // the usual torn write: nothing to replay
        Map<Long, long[]> producers = new HashMap<>();
        long start = readSnapshot(log.dir(), log.logEndOffset(), producers);
        if (start > after + 1) {
            producers.clear();   // the snapshot cannot tell the markers before it
            start = 0;
        }
        PartitionLog.Cursor cursor = log.cursor(start, Long.MAX_VALUE);
        try {
            for (PartitionLog.Located l = cursor.next(); l != null; l = cursor.next()) {
                Batch b = l.batch();
                if (b.isControl() && b.baseOffset >= active && b.baseOffset > after && b.producerId >= 0) {
                    long[] p = producers.get(b.producerId);
                    if (p != null && p[1] >= 0 && b.producerEpoch >= p[0]
                            && isAbort(l.file(), l.at(), b, l.where())) {
                        return true;
                    }
                }
                apply(producers, b);
            }
        } catch (FormatException e) {
            // a torn tail (a crash's leftovers, which the writer cuts away): no batch past it
        }
        return false;
    }

    /** Whether the log holds an abort marker at or after offset {@code from} (its visible batches, through the
     *  partition's cursor; the walk stops at a torn tail). */
    private static boolean abortAfter(PartitionLog log, long from) throws IOException {
        PartitionLog.Cursor cursor = log.cursor(from, Long.MAX_VALUE);
        try {
            for (PartitionLog.Located l = cursor.next(); l != null; l = cursor.next()) {
                if (l.batch().isControl() && isAbort(l.file(), l.at(), l.batch(), l.where())) return true;
            }
        } catch (FormatException e) {
            // a torn tail (a crash's leftovers, which the writer cuts away): no batch past it
        }
        return false;
    }

    /** Whether control batch {@code b} at {@code at} of {@code map} is an abort marker (key: version 0, type 0,
     *  big-endian shorts); a control record that is not a marker aborts nothing (the Python writer's rule). */
    private static boolean isAbort(ByteBuffer map, int at, Batch b, String where) throws FormatException {
        Body body = new Body(b, b.body(map, at, null, where), where);
        if (body.keyLength(0) != 4) return false;
        ByteBuffer key = body.buffer().duplicate().order(ByteOrder.BIG_ENDIAN);
        int k = body.keyDataStart();
        return key.getShort(k) == 0 && key.getShort(k + 2) == 0;
    }

    /** Whether a transactional batch of {@code producerId} at {@code offset} belongs to an aborted transaction. */
    static boolean aborted(Map<Long, List<long[]>> aborted, long producerId, long offset) {
        List<long[]> ranges = aborted.get(producerId);
        if (ranges == null) return false;
        for (long[] r : ranges) {
            if (r[0] <= offset && offset <= r[1]) return true;
        }
        return false;
    }

    /** A msgpack decoder for the producer snapshot's document: nil, booleans, integers, floats, strings, binaries,
     *  arrays and maps, nested at most 16 deep; anything else, or a length past the bytes, is a FormatException. */
    static final class MsgPack {
        private final ByteBuffer in;

        MsgPack(ByteBuffer in) {
            this.in = in.slice().order(ByteOrder.BIG_ENDIAN);
        }

        Object value(int depth) throws FormatException {
            if (depth > 16) throw new FormatException("msgpack nested too deep");
            if (!in.hasRemaining()) throw new FormatException("msgpack truncated");
            int t = in.get() & 0xFF;
            if (t <= 0x7f) return (long) t;
            if (t >= 0xe0) return (long) (byte) t;
            if (t >= 0x80 && t <= 0x8f) return map(t & 0x0f, depth);
            if (t >= 0x90 && t <= 0x9f) return array(t & 0x0f, depth);
            if (t >= 0xa0 && t <= 0xbf) return string(t & 0x1f);
            try {
                return switch (t) {
                    case 0xc0 -> null;
                    case 0xc2 -> Boolean.FALSE;
                    case 0xc3 -> Boolean.TRUE;
                    case 0xc4 -> bytes(in.get() & 0xFF);
                    case 0xc5 -> bytes(in.getShort() & 0xFFFF);
                    case 0xc6 -> bytes(length(in.getInt()));
                    case 0xca -> (double) in.getFloat();
                    case 0xcb -> in.getDouble();
                    case 0xcc -> (long) (in.get() & 0xFF);
                    case 0xcd -> (long) (in.getShort() & 0xFFFF);
                    case 0xce -> in.getInt() & 0xFFFFFFFFL;
                    case 0xcf -> {
                        long v = in.getLong();
                        if (v < 0) throw new FormatException("msgpack uint64 past 2^63-1");
                        yield v;
                    }
                    case 0xd0 -> (long) in.get();
                    case 0xd1 -> (long) in.getShort();
                    case 0xd2 -> (long) in.getInt();
                    case 0xd3 -> in.getLong();
                    case 0xd9 -> string(in.get() & 0xFF);
                    case 0xda -> string(in.getShort() & 0xFFFF);
                    case 0xdb -> string(length(in.getInt()));
                    case 0xdc -> array(in.getShort() & 0xFFFF, depth);
                    case 0xdd -> array(length(in.getInt()), depth);
                    case 0xde -> map(in.getShort() & 0xFFFF, depth);
                    case 0xdf -> map(length(in.getInt()), depth);
                    default -> throw new FormatException("msgpack type 0x" + Integer.toHexString(t) + " not expected");
                };
            } catch (java.nio.BufferUnderflowException e) {
                throw new FormatException("msgpack truncated");
            }
        }

        private int length(int n) throws FormatException {
            if (n < 0 || n > in.remaining()) throw new FormatException("msgpack length past the document");
            return n;
        }

        private byte[] bytes(int n) throws FormatException {
            byte[] b = new byte[length(n)];
            in.get(b);
            return b;
        }

        private String string(int n) throws FormatException {
            return new String(bytes(n), StandardCharsets.UTF_8);
        }

        private List<Object> array(int n, int depth) throws FormatException {
            List<Object> out = new ArrayList<>(length(n));
            for (int i = 0; i < n; i++) out.add(value(depth + 1));
            return out;
        }

        private Map<Object, Object> map(int n, int depth) throws FormatException {
            Map<Object, Object> out = new HashMap<>(2 * length(n));
            for (int i = 0; i < n; i++) {
                Object k = value(depth + 1);
                out.put(k, value(depth + 1));
            }
            return out;
        }
    }
}
