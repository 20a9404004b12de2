package dev.edgekit.sdk;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON (RFC 8259) reader and writer; the JDK has none.
 *
 * <p>Values map to Java as: object to {@code LinkedHashMap<String, Object>} (key order kept; a repeated key keeps
 * the last value, as Python does), array to {@code ArrayList<Object>}, string to {@code String}, {@code true} and
 * {@code false} to {@code Boolean}, {@code null} to {@code null}, a number without fraction or exponent to
 * {@code Long} (or {@code BigInteger} beyond 64 bits), any other number to {@code Double}. The reader refuses
 * what JSON does not allow (NaN, leading zeros, trailing commas, unescaped control characters, content after the
 * value, invalid UTF-8) and nesting deeper than {@link #MAX_DEPTH}. The writer takes those types (and any
 * {@code Map}, {@code List}, {@code Number}, {@code Boolean}, {@code CharSequence}) and escapes every non-ASCII
 * character, so its output is ASCII.
 */
public final class Json {
    /** The deepest nesting of arrays and objects the reader accepts. */
    public static final int MAX_DEPTH = 512;

    private final String text;
    private int pos;

    private Json(String text) {
        this.text = text;
    }

    /** Parses one JSON document; throws {@link IllegalArgumentException} saying what is wrong and where. */
    public static Object parse(String text) {
        Json p = new Json(text);
        p.skipSpace();
        Object value = p.value(0);
        p.skipSpace();
        if (p.pos != text.length()) {
            throw p.error("unexpected content after the JSON value");
        }
        return value;
    }

    /** Parses UTF-8 bytes (the buffer's remaining bytes; its position is not moved). */
    public static Object parse(ByteBuffer utf8) {
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
        CharBuffer chars;
        try {
            chars = decoder.decode(utf8.duplicate());
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException("JSON text is not valid UTF-8");
        }
        return parse(chars.toString());
    }

    /** Parses UTF-8 bytes. */
    public static Object parse(byte[] utf8) {
        return parse(ByteBuffer.wrap(utf8));
    }

    /** The JSON text of {@code value}; throws {@link IllegalArgumentException} for what JSON cannot hold. */
    public static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, 0);
        return out.toString();
    }

    // -- reader ----------------------------------------------------------------------------------------------

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("invalid JSON at character " + pos + ": " + what);
    }

    private void skipSpace() {
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private Object value(int depth) {
        if (pos >= text.length()) {
            throw error("a value was expected, the text ended");
        }
        char c = text.charAt(pos);
        switch (c) {
            case '{':
                return object(depth + 1);
            case '[':
                return array(depth + 1);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, pos)) {
            throw error("unexpected word (JSON has true, false and null)");
        }
        pos += word.length();
        return value;
    }

    private Map<String, Object> object(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nested deeper than " + MAX_DEPTH);
        }
        pos++; // '{'
        Map<String, Object> map = new LinkedHashMap<String, Object>();
        skipSpace();
        if (pos < text.length() && text.charAt(pos) == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipSpace();
            if (pos >= text.length() || text.charAt(pos) != '"') {
                throw error("an object key (a string) was expected");
            }
            String key = string();
            skipSpace();
            expect(':');
            skipSpace();
            map.put(key, value(depth));
            skipSpace();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect('}');
            return map;
        }
    }

    private List<Object> array(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nested deeper than " + MAX_DEPTH);
        }
        pos++; // '['
        List<Object> list = new ArrayList<Object>();
        skipSpace();
        if (pos < text.length() && text.charAt(pos) == ']') {
            pos++;
            return list;
        }
        while (true) {
            skipSpace();
            list.add(value(depth));
            skipSpace();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect(']');
            return list;
        }
    }

    private void expect(char c) {
        if (pos >= text.length() || text.charAt(pos) != c) {
            throw error("'" + c + "' was expected");
        }
        pos++;
    }

    private String string() {
        pos++; // opening quote
        StringBuilder sb = null;
        int start = pos;
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string");
            }
            char c = text.charAt(pos);
            if (c == '"') {
                String s = sb == null ? text.substring(start, pos) : sb.append(text, start, pos).toString();
                pos++;
                return s;
            }
            if (c < 0x20) {
                throw error("control character in a string (escape it)");
            }
            if (c != '\\') {
                pos++;
                continue;
            }
            if (sb == null) {
                sb = new StringBuilder();
            }
            sb.append(text, start, pos);
            pos++;
            if (pos >= text.length()) {
                throw error("unterminated escape");
            }
            char e = text.charAt(pos++);
            switch (e) {
                case '"':
                case '\\':
                case '/':
                    sb.append(e);
                    break;
                case 'b':
                    sb.append('\b');
                    break;
                case 'f':
                    sb.append('\f');
                    break;
                case 'n':
                    sb.append('\n');
                    break;
                case 'r':
                    sb.append('\r');
                    break;
                case 't':
                    sb.append('\t');
                    break;
                case 'u':
                    sb.append(hex4());
                    break;
                default:
                    pos--;
                    throw error("invalid escape '\\" + e + "'");
            }
            start = pos;
        }
    }

    private char hex4() {
        if (pos + 4 > text.length()) {
            throw error("\\u needs four hex digits");
        }
        int v = 0;
        for (int i = 0; i < 4; i++) {
            int d = Character.digit(text.charAt(pos + i), 16);
            if (d < 0) {
                throw error("\\u needs four hex digits");
            }
            v = v * 16 + d;
        }
        pos += 4;
        return (char) v;
    }

    private Object number() {
        int start = pos;
        boolean integral = true;
        if (text.charAt(pos) == '-') {
            pos++;
        }
        if (pos < text.length() && text.charAt(pos) == '0') {
            pos++;
        } else if (!digits()) {
            throw error("a digit was expected");
        }
        if (pos < text.length() && text.charAt(pos) == '.') {
            integral = false;
            pos++;
            if (!digits()) {
                throw error("a digit was expected after '.'");
            }
        }
        if (pos < text.length() && (text.charAt(pos) == 'e' || text.charAt(pos) == 'E')) {
            integral = false;
            pos++;
            if (pos < text.length() && (text.charAt(pos) == '+' || text.charAt(pos) == '-')) {
                pos++;
            }
            if (!digits()) {
                throw error("a digit was expected in the exponent");
            }
        }
        String s = text.substring(start, pos);
        if (!integral) {
            return Double.valueOf(s);
        }
        if (s.length() <= 18) {
            return Long.valueOf(s);
        }
        BigInteger big = new BigInteger(s);
        return big.bitLength() < 64 ? (Object) Long.valueOf(big.longValue()) : big;
    }

    private boolean digits() {
        int start = pos;
        while (pos < text.length() && text.charAt(pos) >= '0' && text.charAt(pos) <= '9') {
            pos++;
        }
        return pos > start;
    }

    // -- writer ----------------------------------------------------------------------------------------------

    private static void write(StringBuilder out, Object value, int depth) {
        if (depth > MAX_DEPTH) {
            throw new IllegalArgumentException("JSON value nested deeper than " + MAX_DEPTH);
        }
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean) {
            out.append(((Boolean) value).booleanValue() ? "true" : "false");
        } else if (value instanceof CharSequence) {
            quote(out, value.toString());
        } else if (value instanceof Double || value instanceof Float) {
            double d = ((Number) value).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON has no number for " + d + " (send null instead)");
            }
            out.append(Double.toString(d));
        } else if (value instanceof Long || value instanceof Integer || value instanceof Short
                || value instanceof Byte || value instanceof BigInteger || value instanceof BigDecimal) {
            out.append(value.toString()); // BigDecimal.toString: JSON's number syntax (1E+3, 0.001)
        } else if (value instanceof Map) {
            out.append('{');
            Iterator<? extends Map.Entry<?, ?>> it = ((Map<?, ?>) value).entrySet().iterator();
            while (it.hasNext()) {
                Map.Entry<?, ?> e = it.next();
                if (!(e.getKey() instanceof CharSequence)) {
                    throw new IllegalArgumentException("JSON object keys are strings, not " + e.getKey());
                }
                quote(out, e.getKey().toString());
                out.append(':');
                write(out, e.getValue(), depth + 1);
                if (it.hasNext()) {
                    out.append(',');
                }
            }
            out.append('}');
        } else if (value instanceof List) {
            out.append('[');
            Iterator<?> it = ((List<?>) value).iterator();
            while (it.hasNext()) {
                write(out, it.next(), depth + 1);
                if (it.hasNext()) {
                    out.append(',');
                }
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("no JSON form for a " + value.getClass().getName());
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private static void quote(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                case '\n':
                    out.append("\\n");
                    break;
                case '\r':
                    out.append("\\r");
                    break;
                case '\t':
                    out.append("\\t");
                    break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        out.append("\\u").append(HEX[c >> 12]).append(HEX[(c >> 8) & 15]);
                        out.append(HEX[(c >> 4) & 15]).append(HEX[c & 15]);
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }
}
