package dev.edgekit.sdk;

import java.util.ArrayList;
import java.util.List;

/**
 * The SDK's unit tests, without a test framework: {@code java -cp CLASSES dev.edgekit.sdk.SdkTest DIR} runs every
 * check, prints one line per failure and a summary, and exits 1 when any failed.
 */
public final class SdkTest {
    interface Body {
        void run() throws Exception;
    }

    private static final List<String> FAILURES = new ArrayList<String>();
    private static int ran;

    private SdkTest() {
    }

    /** {@code args[0]}: a folder the tests may write in (they write nowhere else). */
    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: SdkTest SCRATCH_DIR");
            System.exit(2);
        }
        JsonTests.run();
        WireTests.run();
        ClientTests.run(new java.io.File(args[0]));
        for (String f : FAILURES) {
            System.out.println("FAIL " + f);
        }
        System.out.println(ran + " tests, " + FAILURES.size() + " failed");
        System.exit(FAILURES.isEmpty() ? 0 : 1);
    }

    /** Runs one named test, recording a failure (an assertion or any exception). */
    static void test(String name, Body body) {
        ran++;
        try {
            body.run();
        } catch (Throwable t) {
            FAILURES.add(name + ": " + t);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void equal(Object got, Object want) {
        if (got == null ? want != null : !got.equals(want)) {
            throw new AssertionError("got " + got + ", want " + want);
        }
    }

    /** {@code body} must throw {@code type} with a message containing {@code part}; returns it. */
    static <T extends Throwable> T raises(Class<T> type, String part, Body body) {
        try {
            body.run();
        } catch (Throwable t) {
            if (!type.isInstance(t)) {
                throw new AssertionError("want " + type.getSimpleName() + ", got " + t, t);
            }
            String m = String.valueOf(t.getMessage());
            if (!m.contains(part)) {
                throw new AssertionError("message '" + m + "' lacks '" + part + "'");
            }
            return type.cast(t);
        }
        throw new AssertionError("no " + type.getSimpleName() + " raised (want one saying '" + part + "')");
    }
}
