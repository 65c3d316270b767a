package org.pylog.spark;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * The headers section of a batch body (docs/FORMAT.md): one msgpack array of {@code record_count} arrays of
 * {@code [str, bin | nil]} pairs, and nothing after it.
 *
 * <p>Invariants: every array, {@code str} and {@code bin} is bounded by the bytes left in the section before
 * anything is allocated (a hostile count costs nothing); a map, an extension type or any other item where the
 * spec puts a pair is refused with {@link FormatException}; keys are valid UTF-8.
 */
public final class Headers {
    private final ByteBuffer b;
    private final int end;
    private final String where;
    private int at;

    /** Receives one header of record {@code record}; {@code valueAt} is -1 for a null value. */
    public interface Sink {
        void header(int record, String key, ByteBuffer buf, int valueAt, int valueLength);
    }

    private Headers(ByteBuffer b, int at, int end, String where) {
        this.b = b;
        this.at = at;
        this.end = end;
        this.where = where;
    }

    /** Decodes the section of {@code body} into {@code sink}, record by record, checking every bound. */
    public static void decode(Body body, Sink sink, String where) throws FormatException {
        ByteBuffer buf = body.buffer();
        Headers h = new Headers(buf, buf.position() + body.headersAt, buf.position() + body.headersEnd, where);
        long records = h.arrayHeader();
        if (records != body.n) {
            throw h.bad("headers section holds " + records + " records, the batch " + body.n);
        }
        for (int r = 0; r < body.n; r++) {
            long pairs = h.arrayHeader();
            for (long p = 0; p < pairs; p++) {
                if (h.arrayHeader() != 2) {
                    throw h.bad("a header is not a [key, value] pair");
                }
                String key = h.string();
                int tag = h.u8(h.at);
                if (tag == 0xC0) {
                    h.at++;
                    sink.header(r, key, buf, -1, 0);
                } else {
                    int len = h.binHeader();
                    sink.header(r, key, buf, h.at, len);
                    h.at += len;
                }
            }
        }
        if (h.at != h.end) {
            throw h.bad((h.end - h.at) + " bytes after the headers");
        }
    }

    private FormatException bad(String what) {
        return new FormatException(where + ": headers section: " + what);
    }

    private int u8(int i) throws FormatException {
        if (i >= end) throw bad("ends inside an item");
        return b.get(i) & 0xFF;
    }

    private long bigEndian(int n) throws FormatException {
        if (at + n > end) throw bad("ends inside an item");
        long v = 0;
        for (int i = 0; i < n; i++) v = (v << 8) | (b.get(at + i) & 0xFF);
        at += n;
        return v;
    }

    private long bounded(long count, int minItemBytes) throws FormatException {
        if (count * minItemBytes > end - at) throw bad("claims " + count + " items, more than the section holds");
        return count;
    }

    private long arrayHeader() throws FormatException {
        int t = u8(at++);
        if ((t & 0xF0) == 0x90) return bounded(t & 0x0F, 1);
        if (t == 0xDC) return bounded(bigEndian(2), 1);
        if (t == 0xDD) return bounded(bigEndian(4), 1);
        throw bad("expected an array, found type 0x" + Integer.toHexString(t));
    }

    private int lengthChecked(long len) throws FormatException {
        if (len > end - at) throw bad("an item of " + len + " bytes runs past the section");
        return (int) len;
    }

    private String string() throws FormatException {
        int t = u8(at++);
        long len;
        if ((t & 0xE0) == 0xA0) len = t & 0x1F;
        else if (t == 0xD9) len = bigEndian(1);
        else if (t == 0xDA) len = bigEndian(2);
        else if (t == 0xDB) len = bigEndian(4);
        else throw bad("a header key is not a str (type 0x" + Integer.toHexString(t) + ")");
        int n = lengthChecked(len);
        ByteBuffer s = b.duplicate();
        s.limit(at + n).position(at);
        at += n;
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(s).toString();
        } catch (CharacterCodingException e) {
            throw bad("a header key is not UTF-8");
        }
    }

    private int binHeader() throws FormatException {
        int t = u8(at++);
        long len;
        if (t == 0xC4) len = bigEndian(1);
        else if (t == 0xC5) len = bigEndian(2);
        else if (t == 0xC6) len = bigEndian(4);
        else throw bad("a header value is neither bin nor nil (type 0x" + Integer.toHexString(t) + ")");
        return lengthChecked(len);
    }
}
