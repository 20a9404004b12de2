package dev.edgekit.sdk;

import static dev.edgekit.sdk.SdkTest.check;
import static dev.edgekit.sdk.SdkTest.equal;
import static dev.edgekit.sdk.SdkTest.raises;
import static dev.edgekit.sdk.SdkTest.test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class WireTests {
    private WireTests() {
    }

    /** A message with {@code header} (JSON text) and {@code payload} bytes. */
    static ByteBuffer message(String header, int payload) {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocateDirect(8 + h.length + payload).order(ByteOrder.LITTLE_ENDIAN);
        b.put(new byte[] {'E', 'K', 'T', '1'}).putInt(h.length).put(h);
        b.clear();
        return b;
    }

    static String entry(String name, String dtype, String shape, long offset, long nbytes) {
        return "{\"name\": " + name + ", \"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"offset\": " + offset
                + ", \"nbytes\": " + nbytes + "}";
    }

    static void run() {
        test("tensor factories and accessors for every dtype", () -> {
            Tensor f = Tensor.ofFloat32(new float[] {1.5f, -2f, Float.NaN, 0f, 1e-40f, 3f}, 2, 3);
            equal(f.dtype(), DType.FLOAT32);
            check(Arrays.equals(f.shape(), new long[] {2, 3}), "shape");
            equal(f.size(), 6);
            equal(f.byteSize(), 24);
            check(Arrays.equals(f.toFloatArray(), new float[] {1.5f, -2f, Float.NaN, 0f, 1e-40f, 3f}), "floats");
            check(f.data().isDirect() && f.data().isReadOnly(), "a read-only view of a direct buffer");
            equal(f.data().order(), ByteOrder.LITTLE_ENDIAN);
            equal(f.data().get(0) & 0xff, 0); // 1.5f = 0x3fc00000, little-endian
            equal(f.data().get(3) & 0xff, 0x3f);
            check(Arrays.equals(Tensor.ofFloat64(new double[] {0.1}, 1).toDoubleArray(), new double[] {0.1}), "f64");
            long[] ids = {101, -1, Long.MAX_VALUE, Long.MIN_VALUE};
            check(Arrays.equals(Tensor.ofInt64(ids, 1, 4).toLongArray(), ids), "int64");
            check(Arrays.equals(Tensor.ofInt32(new int[] {7, -7}, 2).toIntArray(), new int[] {7, -7}), "int32");
            byte[] px = {0, 127, (byte) 255};
            Tensor u8 = Tensor.ofUint8(px, 3);
            equal(u8.dtype(), DType.UINT8);
            check(Arrays.equals(u8.toByteArray(), px) && (u8.toByteArray()[2] & 0xff) == 255, "uint8");
            equal(Tensor.ofInt8(px, 3).dtype(), DType.INT8);
            short[] half = {0x3c00, (short) 0xbc00};
            check(Arrays.equals(Tensor.ofShorts(DType.FLOAT16, half, 2).toShortArray(), half), "float16 bits");
            boolean[] mask = {true, false, true};
            check(Arrays.equals(Tensor.ofBool(mask, 3).toBooleanArray(), mask), "bool");
            Tensor scalar = Tensor.ofFloat32(new float[] {4f});
            equal(scalar.shape().length, 0);
            equal(scalar.size(), 1);
            equal(Tensor.zeros(DType.INT64, 0, 5).byteSize(), 0);
        });
        test("tensor refusals: wrong count, negative dims, wrong accessor, buffer size", () -> {
            raises(IllegalArgumentException.class, "do not fill", () -> Tensor.ofFloat32(new float[5], 2, 3));
            raises(IllegalArgumentException.class, "negative", () -> Tensor.ofFloat32(new float[1], -1, -1));
            raises(IllegalStateException.class, "holds int64", () -> Tensor.ofInt64(new long[1], 1).toFloatArray());
            raises(IllegalArgumentException.class, "16-bit", () -> Tensor.ofShorts(DType.INT32, new short[1], 1));
            raises(IllegalArgumentException.class, "needs 8 bytes", () -> Tensor.wrap(DType.FLOAT32, new long[] {2},
                    ByteBuffer.allocate(7)));
            raises(IllegalArgumentException.class, "larger than 2 GiB", () -> Tensor.zeros(DType.INT64, 1L << 28));
        });
        test("wrap uses a direct buffer as is and copies a heap one", () -> {
            ByteBuffer direct = ByteBuffer.allocateDirect(8);
            Tensor t = Tensor.wrap(DType.INT32, new long[] {2}, direct);
            direct.order(ByteOrder.LITTLE_ENDIAN).putInt(4, 9);
            check(Arrays.equals(t.toIntArray(), new int[] {0, 9}), "shares the direct buffer");
            byte[] raw = {1, 0, 0, 0};
            Tensor h = Tensor.fromBytes(DType.INT32, raw, 1);
            raw[0] = 2;
            check(h.data().isDirect() && h.toIntArray()[0] == 1, "copied into a direct buffer");
            equal(h, Tensor.ofInt32(new int[] {1}, 1));
        });
        test("encode then decode gives the same tensors, in order, and the metadata", () -> {
            Map<String, Tensor> in = new LinkedHashMap<String, Tensor>();
            in.put("ids", Tensor.ofInt64(new long[] {1, 2, 3}, 1, 3));
            in.put("x", Tensor.ofFloat32(new float[] {0.25f}));
            in.put("empty", Tensor.zeros(DType.UINT8, 0));
            in.put("m", Tensor.ofBool(new boolean[] {true, false}, 2));
            Map<String, Object> meta = new LinkedHashMap<String, Object>();
            meta.put("version", "v2");
            meta.put("inference_ms", 1.5);
            ByteBuffer body = TensorCodec.encode(in, meta);
            equal(body.remaining(), body.capacity());
            equal(body.getInt(4) + 8 + 24 + 4 + 0 + 2, body.remaining());
            InferResult out = TensorCodec.decode(body);
            equal(new ArrayList<String>(out.outputs().keySet()), Arrays.asList("ids", "x", "empty", "m"));
            for (String n : in.keySet()) {
                equal(out.output(n), in.get(n));
                check(out.output(n).data().isDirect(), "decoded tensors are direct");
            }
            equal(out.meta(), meta);
            equal(out.version(), "v2");
            equal(out.inferenceMs(), 1.5);
            equal(out.requestId(), -1L);
            raises(IllegalArgumentException.class, "outputs: [ids", () -> out.output("nope"));
            ByteBuffer heap = ByteBuffer.allocate(body.remaining());
            heap.put(body.duplicate()).flip();
            equal(TensorCodec.decode(heap).output("ids"), in.get("ids"));
        });
        test("decode reads what Python's encode_tensors writes", () -> {
            // encode_tensors({"a": np.array([[1, 2]], dtype=np.int16)}, {"batch": 1}) byte for byte
            String h = "{\"batch\": 1, \"tensors\": [{\"name\": \"a\", \"dtype\": \"int16\", \"shape\": [1, 2], "
                    + "\"offset\": 0, \"nbytes\": 4}]}";
            ByteBuffer b = message(h, 4);
            b.position(b.capacity() - 4);
            b.put(new byte[] {1, 0, 2, 0}).clear();
            InferResult r = TensorCodec.decode(b);
            check(Arrays.equals(r.output("a").toShortArray(), new short[] {1, 2}), "values");
            equal(r.meta().get("batch"), 1L);
        });
        test("decode of mutated messages succeeds or throws WireException, nothing else", () -> {
            Map<String, Tensor> in = new LinkedHashMap<String, Tensor>();
            in.put("ids", Tensor.ofInt64(new long[] {1, 2, 3}, 1, 3));
            in.put("x", Tensor.ofFloat32(new float[] {0.25f, 2f}, 2));
            ByteBuffer good = TensorCodec.encode(in, null);
            byte[] base = new byte[good.remaining()];
            good.get(base);
            java.util.Random rng = new java.util.Random(19);
            for (int i = 0; i < 5000; i++) {
                byte[] m = Arrays.copyOf(base, rng.nextInt(4) == 0 ? rng.nextInt(base.length + 1) : base.length);
                for (int k = rng.nextInt(4); k >= 0 && m.length > 0; k--) {
                    int at = rng.nextInt(m.length);
                    m[at] = rng.nextBoolean() ? (byte) rng.nextInt(256) : (byte) "0123456789-[]{},\":e".charAt(rng.nextInt(17));
                }
                try {
                    TensorCodec.decode(ByteBuffer.wrap(m));
                } catch (WireException e) {
                    // refused, as it should be
                }
            }
        });
        test("encode refuses names it cannot send", () -> {
            Map<String, Tensor> in = new LinkedHashMap<String, Tensor>();
            in.put("", Tensor.ofInt32(new int[] {1}));
            raises(WireException.class, "1 to 256", () -> TensorCodec.encode(in, null));
        });
        String ok = entry("\"a\"", "float32", "[2]", 0, 8);
        Object[][] bad = {
            {ByteBuffer.wrap("EKT2xxxx{}".getBytes(StandardCharsets.US_ASCII)), "missing EKT1"},
            {ByteBuffer.wrap(new byte[] {'E', 'K', 'T'}), "missing EKT1"},
            {header(1 << 21), "larger than 1048576"},
            {header(100), "exceeds the body"},
            {message("{\"tensors\": 5}", 0), "'tensors' list"},
            {message("[1]", 0), "'tensors' list"},
            {message("{\"tensors\": [", 0), "'tensors' list"},
            {message("{\"tensors\": [" + ok + "]}", 7), "do not match its 8 bytes"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[2]", 1, 8) + "]}", 8), "do not match"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[2]", -1, 8) + "]}", 8), "do not match"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[2]", Long.MAX_VALUE - 3, 8) + "]}", 8),
                "do not match"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[3]", 0, 8) + "]}", 8), "do not match"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[-2]", 0, 8) + "]}", 8), "negative"},
            {message("{\"tensors\": [" + entry("\"a\"", "complex64", "[2]", 0, 8) + "]}", 8), "unsupported dtype"},
            {message("{\"tensors\": [" + entry("\"\"", "float32", "[2]", 0, 8) + "]}", 8), "1 to 256"},
            {message("{\"tensors\": [" + entry("7", "float32", "[2]", 0, 8) + "]}", 8), "1 to 256"},
            {message("{\"tensors\": [" + ok + ", " + ok + "]}", 16), "listed twice"},
            {message("{\"tensors\": [" + ok + ", " + entry("\"b\"", "float32", "[2]", 0, 8) + "]}", 8), "add up"},
            {message("{\"tensors\": [{\"name\": \"a\"}]}", 0), "needs name, dtype"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[2.0]", 0, 8) + "]}", 8), "needs name"},
            {message("{\"tensors\": [" + entry("\"a\"", "float32", "[" + ones(33) + "]", 0, 4) + "]}", 4), "32"},
            {message("{\"tensors\": [" + many(1025) + "]}", 0), "at most 1024"},
        };
        for (Object[] c : bad) {
            test("decode refuses: " + c[1], () -> raises(WireException.class, (String) c[1],
                    () -> TensorCodec.decode((ByteBuffer) c[0])));
        }
    }

    private static ByteBuffer header(int length) {
        ByteBuffer b = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN);
        b.put(new byte[] {'E', 'K', 'T', '1'}).putInt(length).put(new byte[8]);
        b.clear();
        return b;
    }

    private static String ones(int n) {
        List<String> dims = new ArrayList<String>();
        for (int i = 0; i < n; i++) {
            dims.add("1");
        }
        return String.join(", ", dims);
    }

    private static String many(int n) {
        List<String> entries = new ArrayList<String>();
        for (int i = 0; i < n; i++) {
            entries.add(entry("\"t" + i + "\"", "uint8", "[0]", 0, 0));
        }
        return String.join(", ", entries);
    }
}
