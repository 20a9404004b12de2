package dev.edgekit.sdk;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The agent's binary tensor encoding, {@value #CONTENT_TYPE}:
 * {@code "EKT1" | uint32 LE header length | UTF-8 JSON header | payload}. The header is
 * {@code {"tensors": [{"name", "dtype", "shape", "offset", "nbytes"}], ...metadata}}; offsets count from the start
 * of the payload; elements are C order, little-endian.
 */
public final class TensorCodec {
    public static final String CONTENT_TYPE = "application/x-edgekit-tensors";
    /** The largest header the decoder reads (as the agent). */
    public static final int MAX_HEADER = 1 << 20;
    /** The most tensors in one message (as the agent). */
    public static final int MAX_TENSORS = 1024;
    /** The longest tensor name, in characters. */
    public static final int MAX_NAME = 256;
    /** The most dimensions of one tensor. */
    public static final int MAX_DIMS = 32;

    private static final byte[] MAGIC = {'E', 'K', 'T', '1'};

    private TensorCodec() {
    }

    /** One message in parts: {@code prefix} (magic, length, header) then each tensor's bytes. */
    static final class Parts {
        final byte[] prefix;
        final ByteBuffer[] payloads;
        final long length;

        Parts(byte[] prefix, ByteBuffer[] payloads, long length) {
            this.prefix = prefix;
            this.payloads = payloads;
            this.length = length;
        }
    }

    /** {@code tensors} (in the map's order) and header {@code meta} (may be null) as one message. */
    public static ByteBuffer encode(Map<String, Tensor> tensors, Map<String, Object> meta) throws WireException {
        Parts parts = parts(tensors, meta);
        if (parts.length > Integer.MAX_VALUE) {
            throw new WireException("the tensors add up to more than 2 GiB");
        }
        ByteBuffer out = ByteBuffer.allocateDirect((int) parts.length).order(ByteOrder.LITTLE_ENDIAN);
        out.put(parts.prefix);
        for (ByteBuffer p : parts.payloads) {
            out.put(p);
        }
        out.flip();
        return out;
    }

    static Parts parts(Map<String, Tensor> tensors, Map<String, Object> meta) throws WireException {
        if (tensors.size() > MAX_TENSORS) {
            throw new WireException(tensors.size() + " tensors in one message; at most " + MAX_TENSORS);
        }
        List<Object> entries = new ArrayList<Object>();
        ByteBuffer[] payloads = new ByteBuffer[tensors.size()];
        long offset = 0;
        int i = 0;
        for (Map.Entry<String, Tensor> e : tensors.entrySet()) {
            String name = e.getKey();
            Tensor t = e.getValue();
            if (name == null || name.isEmpty() || name.length() > MAX_NAME) {
                throw new WireException("tensor names are strings of 1 to " + MAX_NAME + " characters");
            }
            if (t == null) {
                throw new WireException("tensor '" + name + "' is null");
            }
            Map<String, Object> entry = new LinkedHashMap<String, Object>();
            List<Object> shape = new ArrayList<Object>();
            for (long d : t.shape()) {
                shape.add(d);
            }
            entry.put("name", name);
            entry.put("dtype", t.dtype().wireName());
            entry.put("shape", shape);
            entry.put("offset", offset);
            entry.put("nbytes", (long) t.byteSize());
            entries.add(entry);
            payloads[i++] = t.data();
            offset += t.byteSize();
        }
        Map<String, Object> header = new LinkedHashMap<String, Object>();
        if (meta != null) {
            header.putAll(meta);
        }
        header.put("tensors", entries);
        byte[] json;
        try {
            json = Json.write(header).getBytes(StandardCharsets.UTF_8);
        } catch (IllegalArgumentException e) {
            throw new WireException("tensor header: " + e.getMessage());
        }
        ByteBuffer prefix = ByteBuffer.allocate(8 + json.length).order(ByteOrder.LITTLE_ENDIAN);
        prefix.put(MAGIC).putInt(json.length).put(json);
        return new Parts(prefix.array(), payloads, 8L + json.length + offset);
    }

    /**
     * Decodes the remaining bytes of {@code body} (its position is not moved). Every entry is checked before a
     * tensor is made: names unique, dtype known, shape and dtype matching the byte count, each tensor inside the
     * payload and all together no larger than it. The tensors are read-only views of {@code body}, which should
     * be direct (a heap buffer is copied once into a direct one).
     */
    public static InferResult decode(ByteBuffer body) throws WireException {
        ByteBuffer b = body.slice().order(ByteOrder.LITTLE_ENDIAN);
        if (b.remaining() < 8 || b.get(0) != 'E' || b.get(1) != 'K' || b.get(2) != 'T' || b.get(3) != '1') {
            throw new WireException("body is not edgekit tensors (missing EKT1 magic)");
        }
        long hlen = b.getInt(4) & 0xffffffffL;
        if (hlen > MAX_HEADER) {
            throw new WireException("tensor header of " + hlen + " bytes is larger than " + MAX_HEADER);
        }
        if (8 + hlen > b.remaining()) {
            throw new WireException("header length exceeds the body");
        }
        ByteBuffer headerBytes = b.duplicate();
        headerBytes.limit((int) (8 + hlen)).position(8);
        Object parsed;
        try {
            parsed = Json.parse(headerBytes);
        } catch (IllegalArgumentException e) {
            parsed = null;
        }
        Object list = parsed instanceof Map ? ((Map<?, ?>) parsed).get("tensors") : null;
        if (!(list instanceof List)) {
            throw new WireException("tensor header is not valid JSON with a 'tensors' list");
        }
        List<?> entries = (List<?>) list;
        if (entries.size() > MAX_TENSORS) {
            throw new WireException(entries.size() + " tensors in one message; at most " + MAX_TENSORS);
        }
        if (!b.isDirect()) {
            ByteBuffer copy = ByteBuffer.allocateDirect(b.remaining());
            copy.put(b.duplicate()).clear();
            b = copy.order(ByteOrder.LITTLE_ENDIAN);
        }
        b.position((int) (8 + hlen));
        ByteBuffer payload = b.slice();
        int size = payload.remaining();
        Map<String, Tensor> out = new LinkedHashMap<String, Tensor>();
        List<Object[]> checked = new ArrayList<Object[]>();
        Set<String> names = new HashSet<String>();
        long total = 0;
        for (Object o : entries) {
            Map<?, ?> e = o instanceof Map ? (Map<?, ?>) o : null;
            Object name = e == null ? null : e.get("name");
            Object dtypeName = e == null ? null : e.get("dtype");
            Object shapeList = e == null ? null : e.get("shape");
            Long offset = e == null ? null : integer(e.get("offset"));
            Long nbytes = e == null ? null : integer(e.get("nbytes"));
            if (name == null || dtypeName == null || !(shapeList instanceof List) || offset == null || nbytes == null) {
                throw new WireException("tensor entry needs name, dtype, shape, offset, nbytes");
            }
            long[] shape = new long[((List<?>) shapeList).size()];
            for (int i = 0; i < shape.length; i++) {
                Long d = integer(((List<?>) shapeList).get(i));
                if (d == null) {
                    throw new WireException("tensor entry needs name, dtype, shape, offset, nbytes");
                }
                shape[i] = d;
            }
            if (!(name instanceof String) || ((String) name).isEmpty() || ((String) name).length() > MAX_NAME) {
                throw new WireException("tensor names are strings of 1 to " + MAX_NAME + " characters");
            }
            String n = (String) name;
            if (!names.add(n)) {
                throw new WireException("tensor '" + n + "' is listed twice");
            }
            DType dtype = dtypeName instanceof String ? DType.fromWireName((String) dtypeName) : null;
            if (dtype == null) {
                throw new WireException("tensor '" + n + "': unsupported dtype " + Json.write(dtypeName));
            }
            if (shape.length > MAX_DIMS) {
                throw new WireException("tensor '" + n + "': more than " + MAX_DIMS + " dimensions");
            }
            long expected;
            try {
                expected = Tensor.byteSize(dtype, shape);
            } catch (IllegalArgumentException ex) {
                throw new WireException("tensor '" + n + "': " + ex.getMessage());
            }
            if (expected != nbytes || offset < 0 || offset > size - nbytes) { // no overflow: nbytes < 2 GiB
                throw new WireException("tensor '" + n + "': shape " + Arrays.toString(shape) + " and dtype " + dtype
                        + " do not match its " + nbytes + " bytes");
            }
            total += nbytes;
            if (total > size) {
                throw new WireException("the tensors' sizes add up to more than the " + size + " bytes of payload");
            }
            checked.add(new Object[] {n, dtype, shape, offset, nbytes});
        }
        for (Object[] c : checked) {
            int offset = (int) (long) (Long) c[3];
            int nbytes = (int) (long) (Long) c[4];
            out.put((String) c[0], Tensor.view((DType) c[1], (long[]) c[2], payload.asReadOnlyBuffer(), offset, nbytes));
        }
        Map<String, Object> meta = new LinkedHashMap<String, Object>();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) parsed).entrySet()) {
            if (!"tensors".equals(e.getKey())) {
                meta.put((String) e.getKey(), e.getValue());
            }
        }
        return new InferResult(out, meta);
    }

    /** A JSON integer that fits a long, else null. */
    private static Long integer(Object o) {
        return o instanceof Long ? (Long) o : null;
    }
}
