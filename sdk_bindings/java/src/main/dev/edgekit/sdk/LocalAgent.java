package dev.edgekit.sdk;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The agent running on this machine, as the Python client's {@code AgentClient.local()} finds it: its root is the
 * argument, else {@code $EDGEKIT_AGENT_ROOT}, else {@code ~/.cache/edgekit/device}; the port is in
 * {@code ROOT/agent/state.json}; the token is {@code $EDGEKIT_AGENT_TOKEN}, else {@code ROOT/agent/token} when this
 * user may read it (reads and inference need none on loopback; load and unload do).
 */
final class LocalAgent {
    static final String DEFAULT_ROOT = "~/.cache/edgekit/device";
    private static final int MAX_FILE = 1 << 20;

    private LocalAgent() {
    }

    static AgentClient client(String root) throws AgentException {
        File dir = root(root);
        File state = new File(new File(dir, "agent"), "state.json");
        Object port;
        try {
            Object parsed = Json.parse(read(state));
            port = parsed instanceof Map ? ((Map<?, ?>) parsed).get("port") : null;
        } catch (IOException | IllegalArgumentException e) {
            throw new AgentException(0, "no agent state at " + state + " (is an agent deployed there? "
                    + "edgekit deploy BUNDLE --local): " + e.getMessage(), e);
        }
        if (!(port instanceof Long)) {
            throw new AgentException(0, state + " names no port");
        }
        String token = System.getenv("EDGEKIT_AGENT_TOKEN");
        if (token == null || token.isEmpty()) {
            try {
                token = new String(read(new File(new File(dir, "agent"), "token")), StandardCharsets.UTF_8).trim();
            } catch (IOException e) {
                token = null; // not readable by this user: reads and inference still work on loopback
            }
        }
        return new AgentClient("127.0.0.1", (int) (long) (Long) port, token);
    }

    static File root(String root) {
        String r = root;
        if (r == null || r.isEmpty()) {
            r = System.getenv("EDGEKIT_AGENT_ROOT");
        }
        if (r == null || r.isEmpty()) {
            r = DEFAULT_ROOT;
        }
        if (r.equals("~") || r.startsWith("~/")) {
            r = System.getProperty("user.home") + r.substring(1);
        }
        return new File(r).getAbsoluteFile();
    }

    private static byte[] read(File file) throws IOException {
        InputStream in = new FileInputStream(file);
        try {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] block = new byte[8192];
            for (int r; (r = in.read(block)) >= 0;) {
                out.write(block, 0, r);
                if (out.size() > MAX_FILE) {
                    throw new IOException(file + " is larger than " + MAX_FILE + " bytes");
                }
            }
            return out.toByteArray();
        } finally {
            in.close();
        }
    }
}
