package dev.edgekit.sdk;

/** The element types the agent's binary tensor encoding carries, with their wire names and sizes. */
public enum DType {
    FLOAT32("float32", 4),
    FLOAT16("float16", 2),
    FLOAT64("float64", 8),
    INT8("int8", 1),
    UINT8("uint8", 1),
    INT16("int16", 2),
    UINT16("uint16", 2),
    INT32("int32", 4),
    INT64("int64", 8),
    BOOL("bool", 1);

    private final String wireName;
    private final int itemSize;

    DType(String wireName, int itemSize) {
        this.wireName = wireName;
        this.itemSize = itemSize;
    }

    /** The name on the wire and in the agent's JSON ("float32", "int64", "bool"...). */
    public String wireName() {
        return wireName;
    }

    /** Bytes per element. */
    public int itemSize() {
        return itemSize;
    }

    /** The dtype named {@code name} on the wire, or {@code null} if the encoding has none of that name. */
    public static DType fromWireName(String name) {
        for (DType d : values()) {
            if (d.wireName.equals(name)) {
                return d;
            }
        }
        return null;
    }

    @Override
    public String toString() {
        return wireName;
    }
}
