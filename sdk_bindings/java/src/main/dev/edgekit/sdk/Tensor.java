package dev.edgekit.sdk;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * An n-dimensional array as the agent sends it: a {@link DType}, a shape ({@code long[]}, {@code []} for a 0-d
 * tensor) and its elements in C order, little-endian, in a direct {@link ByteBuffer}.
 *
 * <p>A tensor is immutable from the outside: {@link #data()} hands out a read-only view. The factory methods copy
 * Java arrays into a new direct buffer; {@link #wrap} takes a buffer the caller filled (no copy when it is direct).
 * Tensors decoded from an answer share one buffer holding the answer's payload.
 */
public final class Tensor {
    private final DType dtype;
    private final long[] shape;
    private final ByteBuffer data; // position 0, limit = byte size, little-endian

    private Tensor(DType dtype, long[] shape, ByteBuffer data) {
        this.dtype = dtype;
        this.shape = shape;
        this.data = data;
    }

    /**
     * A tensor over the remaining bytes of {@code data} (C order, little-endian): used as is when the buffer is
     * direct, copied into a direct one otherwise. Throws {@link IllegalArgumentException} when the shape and
     * dtype do not match the number of bytes.
     */
    public static Tensor wrap(DType dtype, long[] shape, ByteBuffer data) {
        if (dtype == null || shape == null || data == null) {
            throw new IllegalArgumentException("a tensor needs a dtype, a shape and data");
        }
        long[] dims = shape.clone();
        long bytes = byteSize(dtype, dims);
        if (bytes != data.remaining()) {
            throw new IllegalArgumentException("shape " + Arrays.toString(dims) + " of " + dtype + " needs " + bytes
                    + " bytes, the buffer holds " + data.remaining());
        }
        ByteBuffer view;
        if (data.isDirect()) {
            view = data.slice();
        } else {
            view = ByteBuffer.allocateDirect(data.remaining());
            view.put(data.duplicate());
            view.clear();
        }
        return new Tensor(dtype, dims, view.order(ByteOrder.LITTLE_ENDIAN));
    }

    /** A tensor of zeros. */
    public static Tensor zeros(DType dtype, long... shape) {
        return allocate(dtype, shape);
    }

    /** A tensor of any dtype from its raw little-endian C-order bytes (copied). */
    public static Tensor fromBytes(DType dtype, byte[] data, long... shape) {
        return wrap(dtype, shape, ByteBuffer.wrap(data));
    }

    public static Tensor ofFloat32(float[] values, long... shape) {
        Tensor t = allocate(DType.FLOAT32, checked(values.length, shape));
        t.data.asFloatBuffer().put(values);
        return t;
    }

    public static Tensor ofFloat64(double[] values, long... shape) {
        Tensor t = allocate(DType.FLOAT64, checked(values.length, shape));
        t.data.asDoubleBuffer().put(values);
        return t;
    }

    public static Tensor ofInt64(long[] values, long... shape) {
        Tensor t = allocate(DType.INT64, checked(values.length, shape));
        t.data.asLongBuffer().put(values);
        return t;
    }

    public static Tensor ofInt32(int[] values, long... shape) {
        Tensor t = allocate(DType.INT32, checked(values.length, shape));
        t.data.asIntBuffer().put(values);
        return t;
    }

    /** {@code dtype}: {@link DType#INT16}, {@link DType#UINT16} (the bits of each value) or {@link DType#FLOAT16}
     * (IEEE half-precision bits). */
    public static Tensor ofShorts(DType dtype, short[] values, long... shape) {
        requireSize(dtype, 2);
        Tensor t = allocate(dtype, checked(values.length, shape));
        t.data.asShortBuffer().put(values);
        return t;
    }

    /** A uint8 tensor: each byte's bits are the value ({@code b & 0xff}). */
    public static Tensor ofUint8(byte[] values, long... shape) {
        return ofBytes8(DType.UINT8, values, shape);
    }

    public static Tensor ofInt8(byte[] values, long... shape) {
        return ofBytes8(DType.INT8, values, shape);
    }

    private static Tensor ofBytes8(DType dtype, byte[] values, long[] shape) {
        Tensor t = allocate(dtype, checked(values.length, shape));
        t.data.put(values);
        t.data.clear();
        return t;
    }

    public static Tensor ofBool(boolean[] values, long... shape) {
        Tensor t = allocate(DType.BOOL, checked(values.length, shape));
        for (int i = 0; i < values.length; i++) {
            t.data.put(i, values[i] ? (byte) 1 : (byte) 0);
        }
        return t;
    }

    // -- accessors ---------------------------------------------------------------------------------------------

    public DType dtype() {
        return dtype;
    }

    /** The shape (a copy); {@code []} for a 0-d tensor. */
    public long[] shape() {
        return shape.clone();
    }

    /** The number of elements (1 for a 0-d tensor). */
    public int size() {
        return data.capacity() / dtype.itemSize();
    }

    /** The number of bytes of the elements. */
    public int byteSize() {
        return data.capacity();
    }

    /** A read-only little-endian view of the elements (position 0, limit {@link #byteSize()}). */
    public ByteBuffer data() {
        return data.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN);
    }

    /** The raw little-endian bytes (a copy). */
    public byte[] toBytes() {
        byte[] out = new byte[data.capacity()];
        data.duplicate().get(out);
        return out;
    }

    public float[] toFloatArray() {
        requireType(DType.FLOAT32);
        float[] out = new float[size()];
        data.asFloatBuffer().get(out);
        return out;
    }

    public double[] toDoubleArray() {
        requireType(DType.FLOAT64);
        double[] out = new double[size()];
        data.asDoubleBuffer().get(out);
        return out;
    }

    public long[] toLongArray() {
        requireType(DType.INT64);
        long[] out = new long[size()];
        data.asLongBuffer().get(out);
        return out;
    }

    public int[] toIntArray() {
        requireType(DType.INT32);
        int[] out = new int[size()];
        data.asIntBuffer().get(out);
        return out;
    }

    /** The elements of an int16, uint16 or float16 tensor as their 16 bits. */
    public short[] toShortArray() {
        requireSize(dtype, 2);
        short[] out = new short[size()];
        data.asShortBuffer().get(out);
        return out;
    }

    /** The elements of a uint8 or int8 tensor as their 8 bits (for uint8, {@code b & 0xff} is the value). */
    public byte[] toByteArray() {
        if (dtype != DType.UINT8 && dtype != DType.INT8) {
            throw new IllegalStateException("toByteArray reads uint8 or int8 tensors; this one is " + dtype);
        }
        return toBytes();
    }

    public boolean[] toBooleanArray() {
        requireType(DType.BOOL);
        boolean[] out = new boolean[size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = data.get(i) != 0;
        }
        return out;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof Tensor)) {
            return false;
        }
        Tensor t = (Tensor) o;
        return dtype == t.dtype && Arrays.equals(shape, t.shape) && data.equals(t.data);
    }

    @Override
    public int hashCode() {
        return (dtype.hashCode() * 31 + Arrays.hashCode(shape)) * 31 + data.hashCode();
    }

    @Override
    public String toString() {
        return "Tensor(" + dtype + ", shape=" + Arrays.toString(shape) + ")";
    }

    // -- helpers -----------------------------------------------------------------------------------------------

    /** A view of {@code payload}'s bytes [offset, offset + nbytes) as a tensor (the decoder's zero-copy path). */
    static Tensor view(DType dtype, long[] shape, ByteBuffer payload, int offset, int nbytes) {
        ByteBuffer b = payload.duplicate();
        b.limit(offset + nbytes).position(offset);
        return new Tensor(dtype, shape, b.slice().order(ByteOrder.LITTLE_ENDIAN));
    }

    /** The byte size of {@code shape} elements of {@code dtype}; negative dimensions and sizes past 2 GiB fail. */
    static long byteSize(DType dtype, long[] shape) {
        long count = 1;
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("negative dimension in shape " + Arrays.toString(shape));
            }
            count = d == 0 || count == 0 ? 0 : count * d;
            if (count > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("shape " + Arrays.toString(shape) + " has too many elements");
            }
        }
        long bytes = count * dtype.itemSize();
        if (bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("shape " + Arrays.toString(shape) + " of " + dtype
                    + " is larger than 2 GiB");
        }
        return bytes;
    }

    private static Tensor allocate(DType dtype, long[] shape) {
        long[] dims = shape.clone();
        ByteBuffer b = ByteBuffer.allocateDirect((int) byteSize(dtype, dims)).order(ByteOrder.LITTLE_ENDIAN);
        return new Tensor(dtype, dims, b);
    }

    private static long[] checked(int length, long[] shape) {
        if (byteSize(DType.UINT8, shape) != length) {
            throw new IllegalArgumentException(length + " values do not fill shape " + Arrays.toString(shape));
        }
        return shape;
    }

    private static void requireSize(DType dtype, int size) {
        if (dtype.itemSize() != size) {
            throw new IllegalArgumentException("a 16-bit dtype (int16, uint16, float16) was expected, not " + dtype);
        }
    }

    private void requireType(DType expected) {
        if (dtype != expected) {
            throw new IllegalStateException("this tensor holds " + dtype + ", not " + expected);
        }
    }
}
