package dev.edgekit.sdk;

import static dev.edgekit.sdk.SdkTest.check;
import static dev.edgekit.sdk.SdkTest.equal;
import static dev.edgekit.sdk.SdkTest.raises;
import static dev.edgekit.sdk.SdkTest.test;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class JsonTests {
    private JsonTests() {
    }

    static void run() {
        test("json reads every kind of value", () -> {
            Object v = Json.parse(" {\"a\": [1, -2.5, 3e2, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"], \"b\": {}} ");
            Map<?, ?> m = (Map<?, ?>) v;
            List<?> a = (List<?>) m.get("a");
            equal(a.get(0), 1L);
            equal(a.get(1), -2.5);
            equal(a.get(2), 300.0);
            equal(a.get(3), true);
            equal(a.get(4), false);
            check(a.get(5) == null && a.size() == 7, "null kept");
            equal(a.get(6), "x\n\u00e9\ud83d\ude00");
            equal(m.get("b"), new LinkedHashMap<String, Object>());
        });
        test("json integers: long, then BigInteger; -0 and exponents", () -> {
            equal(Json.parse("9223372036854775807"), Long.MAX_VALUE);
            equal(Json.parse("-9223372036854775808"), Long.MIN_VALUE);
            equal(Json.parse("9223372036854775808"), new BigInteger("9223372036854775808"));
            equal(Json.parse("-0"), 0L);
            equal(Json.parse("1E-2"), 0.01);
            equal(Json.parse("0.1"), 0.1);
        });
        test("json keeps key order; a repeated key keeps the last value", () -> {
            Map<?, ?> m = (Map<?, ?>) Json.parse("{\"z\": 1, \"a\": 2, \"z\": 3}");
            equal(Arrays.asList(m.keySet().toArray()), Arrays.asList("z", "a"));
            equal(m.get("z"), 3L);
        });
        String[] bad = {"", " ", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "-", "1e", "+1", "NaN", "Infinity",
            "[1] 2", "tru", "nul", "\"a", "\"\\x\"", "\"\\u12\"", "\"a\u0001\"", "{a:1}", "{\"a\" 1}", "[1 2]",
            "'a'", "[", "\"\\"};
        for (String text : bad) {
            test("json refuses " + Json.write(text), () -> raises(IllegalArgumentException.class, "invalid JSON",
                    () -> Json.parse(text)));
        }
        test("json on mutated text parses or throws IllegalArgumentException, nothing else", () -> {
            String base = "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": 0.1}}";
            java.util.Random rng = new java.util.Random(19);
            String alphabet = "{}[],:\"\\u0123456789eE+-.tfnrl ";
            for (int i = 0; i < 20000; i++) {
                StringBuilder m = new StringBuilder(base.substring(0, rng.nextInt(4) == 0 ? rng.nextInt(base.length())
                        : base.length()));
                for (int k = rng.nextInt(4); k >= 0 && m.length() > 0; k--) {
                    m.setCharAt(rng.nextInt(m.length()), alphabet.charAt(rng.nextInt(alphabet.length())));
                }
                try {
                    Json.parse(m.toString());
                } catch (IllegalArgumentException e) {
                    // refused, as it should be
                }
            }
        });
        test("json refuses invalid UTF-8 bytes", () -> raises(IllegalArgumentException.class, "UTF-8",
                () -> Json.parse(new byte[] {'"', (byte) 0xc3, '"'})));
        test("json refuses nesting deeper than its bound, reads up to it", () -> {
            StringBuilder ok = new StringBuilder();
            for (int i = 0; i < Json.MAX_DEPTH; i++) {
                ok.append('[');
            }
            for (int i = 0; i < Json.MAX_DEPTH; i++) {
                ok.append(']');
            }
            Json.parse(ok.toString());
            raises(IllegalArgumentException.class, "nested deeper", () -> Json.parse("[" + ok + "]"));
        });
        test("json writes standard, ASCII-only text that reads back the same", () -> {
            Map<String, Object> m = new LinkedHashMap<String, Object>();
            m.put("s", "q\"b\\n\n\t\r\u0001\u00e9\ud83d\ude00/");
            m.put("l", Arrays.<Object>asList(1L, 2, -3.25, 1e-7, 1e300, 0.1f, true, null));
            m.put("big", new BigInteger("123456789012345678901234567890"));
            String text = Json.write(m);
            for (char c : text.toCharArray()) {
                check(c >= 0x20 && c < 0x7f, "non-ASCII or control character in " + text);
            }
            check(text.startsWith("{\"s\":\"q\\\"b\\\\n\\n\\t\\r\\u0001\\u00e9\\ud83d\\ude00/\","), text);
            Map<?, ?> back = (Map<?, ?>) Json.parse(text.getBytes(StandardCharsets.US_ASCII));
            equal(back.get("s"), m.get("s"));
            equal(back.get("l"), Arrays.<Object>asList(1L, 2L, -3.25, 1e-7, 1e300, (double) 0.1f, true, null));
            equal(back.get("big"), m.get("big"));
        });
        test("json writer refuses NaN, infinities, non-string keys and unknown types", () -> {
            raises(IllegalArgumentException.class, "no number", () -> Json.write(Double.NaN));
            raises(IllegalArgumentException.class, "no number", () -> Json.write(Float.POSITIVE_INFINITY));
            Map<Object, Object> m = new LinkedHashMap<Object, Object>();
            m.put(1, 2);
            raises(IllegalArgumentException.class, "keys are strings", () -> Json.write(m));
            raises(IllegalArgumentException.class, "no JSON form", () -> Json.write(new Object()));
        });
    }
}
