package dev.edgekit.sdk;

import java.io.Closeable;
import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * A client of one edgekit agent over its HTTP API, on one kept-alive connection.
 *
 * <p>Every call either returns the agent's answer or throws {@link AgentException}: with the HTTP status and the
 * agent's message when it answered an error, with status 0 when it did not answer ({@link AgentTimeoutException}
 * when the timeout passed). A connection the agent closed while it was kept alive is replaced once, transparently.
 * Calls are synchronized: a client may be shared by threads, which then take turns on its connection (use one
 * client per thread for parallel requests).
 */
public final class AgentClient implements Closeable {
    public static final int DEFAULT_PORT = 8765;
    public static final int DEFAULT_CONNECT_TIMEOUT_MS = 10000;
    public static final int DEFAULT_READ_TIMEOUT_MS = 60000;

    private static final Pattern REQUEST_WORD = Pattern.compile("[\\x21-\\x7e]+");
    private static final Pattern MODEL_NAME = Pattern.compile("[\\x21-\\x7e&&[^/?#%]]+");

    private final String host;
    private final int port;
    private final String token;
    private final int connectTimeoutMs;
    private final int readTimeoutMs;
    private HttpConnection conn;

    /** A client of the agent at {@code host:port}; {@code token}: sent as {@code Authorization: Bearer}, or null. */
    public AgentClient(String host, int port, String token) {
        this(host, port, token, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_READ_TIMEOUT_MS);
    }

    /**
     * {@code connectTimeoutMs}: the longest wait for the connection; {@code readTimeoutMs}: the longest wait for
     * each part of an answer (0 waits forever).
     */
    public AgentClient(String host, int port, String token, int connectTimeoutMs, int readTimeoutMs) {
        if (host == null || host.isEmpty() || port <= 0 || port > 65535) {
            throw new IllegalArgumentException("an agent address needs a host and a port in 1..65535");
        }
        if (token != null && (token.indexOf('\r') >= 0 || token.indexOf('\n') >= 0)) {
            throw new IllegalArgumentException("a token cannot hold a line break");
        }
        if (connectTimeoutMs < 0 || readTimeoutMs < 0) {
            throw new IllegalArgumentException("timeouts are milliseconds >= 0");
        }
        this.host = host;
        this.port = port;
        this.token = token == null || token.isEmpty() ? null : token;
        this.connectTimeoutMs = connectTimeoutMs;
        this.readTimeoutMs = readTimeoutMs;
    }

    /** The agent running on this machine for the default root (see {@link LocalAgent}). */
    public static AgentClient local() throws AgentException {
        return LocalAgent.client(null);
    }

    /** The agent running on this machine for {@code root}: port and token read from the root's state. */
    public static AgentClient local(String root) throws AgentException {
        return LocalAgent.client(root);
    }

    public String host() {
        return host;
    }

    public int port() {
        return port;
    }

    /** Closes the kept-alive connection (a later call opens a new one). */
    @Override
    public synchronized void close() {
        if (conn != null) {
            conn.close();
            conn = null;
        }
    }

    // -- API ---------------------------------------------------------------------------------------------------

    /** {@code GET /v1/health}: the agent's status, version, device, runtimes and models. */
    public Map<String, Object> health() throws AgentException {
        return object(request("GET", "/v1/health", null));
    }

    /** {@code GET /v1/models}: one object per model the device keeps. */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> models() throws AgentException {
        Object models = object(request("GET", "/v1/models", null)).get("models");
        if (!(models instanceof List)) {
            throw new AgentException(0, "the agent's model list has no 'models' array");
        }
        return (List<Map<String, Object>>) models;
    }

    /** Loads (or reloads) a model's current version with the agent's settings; needs the token. */
    public Map<String, Object> load(String model) throws AgentException {
        return load(model, null, null, null);
    }

    /** Loads a model with {@code threads}, execution {@code providers} and {@code warmup} runs (null: default). */
    public Map<String, Object> load(String model, Integer threads, List<String> providers, Integer warmup)
            throws AgentException {
        Map<String, Object> body = new LinkedHashMap<String, Object>();
        body.put("threads", threads);
        body.put("providers", providers == null ? null : new ArrayList<Object>(providers));
        body.put("warmup", warmup);
        return object(request("POST", "/v1/models/" + name(model) + "/load", body));
    }

    /** Unloads a model (it stays on the device); needs the token. */
    public Map<String, Object> unload(String model) throws AgentException {
        return object(request("POST", "/v1/models/" + name(model) + "/unload", new LinkedHashMap<String, Object>()));
    }

    /** Runs the model on {@code inputs} (by input name; a LinkedHashMap keeps their order) in binary form. */
    public InferResult infer(String model, Map<String, Tensor> inputs) throws AgentException {
        TensorCodec.Parts parts = TensorCodec.parts(inputs, null);
        HttpConnection.Response r = exchange("POST", "/v1/models/" + name(model) + "/infer",
                TensorCodec.CONTENT_TYPE, parts.prefix, parts.payloads, parts.length, true);
        return TensorCodec.decode(r.body);
    }

    /**
     * Records the pre- and post-processing time the app spent around request {@code requestId} (from
     * {@link InferResult#requestId()}); either time may be null.
     */
    public Map<String, Object> annotate(long requestId, Double preMs, Double postMs) throws AgentException {
        Map<String, Object> body = new LinkedHashMap<String, Object>();
        body.put("request_id", requestId);
        body.put("pre_ms", preMs);
        body.put("post_ms", postMs);
        return object(request("POST", "/v1/telemetry/annotate", body));
    }

    /**
     * Any JSON route of the API (see the agent's {@code /openapi.json}): {@code body} is a JSON value (see
     * {@link Json}) or null for none; returns the parsed answer ({@code {}} for an empty one).
     */
    public Object request(String method, String path, Object body) throws AgentException {
        byte[] json = null;
        if (body != null) {
            try {
                json = Json.write(body).getBytes(StandardCharsets.UTF_8);
            } catch (IllegalArgumentException e) {
                throw new AgentException(0, "request body: " + e.getMessage());
            }
        }
        HttpConnection.Response r = exchange(method, path, "application/json", json, null,
                json == null ? 0 : json.length, false);
        if (!r.body.hasRemaining()) {
            return new LinkedHashMap<String, Object>();
        }
        try {
            return Json.parse(r.body);
        } catch (IllegalArgumentException e) {
            throw new AgentException(0, "the agent's answer is not JSON: " + e.getMessage());
        }
    }

    // -- transport ---------------------------------------------------------------------------------------------

    private synchronized HttpConnection.Response exchange(String method, String path, String contentType,
            byte[] prefix, ByteBuffer[] payloads, long length, boolean binary) throws AgentException {
        if (method.isEmpty() || !path.startsWith("/") || !REQUEST_WORD.matcher(method + path).matches()) {
            throw new IllegalArgumentException("bad request line: " + method + " " + path);
        }
        StringBuilder head = new StringBuilder(256);
        head.append(method).append(' ').append(path).append(" HTTP/1.1\r\n");
        head.append("Host: ").append(host.indexOf(':') >= 0 ? "[" + host + "]" : host).append(':').append(port);
        head.append("\r\nContent-Type: ").append(contentType);
        head.append("\r\nAccept: application/json, ").append(TensorCodec.CONTENT_TYPE);
        head.append("\r\nContent-Length: ").append(length).append("\r\n");
        if (token != null) {
            head.append("Authorization: Bearer ").append(token).append("\r\n");
        }
        byte[] headBytes = head.append("\r\n").toString().getBytes(StandardCharsets.ISO_8859_1);
        HttpConnection.Response r = null;
        for (int attempt = 0; r == null; attempt++) {
            boolean fresh = conn == null;
            try {
                if (fresh) {
                    conn = new HttpConnection(host, port, connectTimeoutMs);
                }
                r = conn.exchange(headBytes, prefix, payloads, length, readTimeoutMs, binary);
            } catch (HttpConnection.StaleConnection e) {
                close();
                if (fresh || attempt > 0) { // a new connection failed: no retry
                    throw new AgentException(0, "connection to the agent at " + address() + " failed: "
                            + e.getMessage(), e);
                }
            } catch (SocketTimeoutException e) {
                close();
                throw new AgentTimeoutException("the agent at " + address() + " did not answer " + method + " "
                        + path + " in time (" + e.getMessage() + ")", e);
            } catch (IOException e) {
                close();
                throw new AgentException(0, "cannot talk to the agent at " + address() + ": " + e, e);
            }
        }
        if ("close".equalsIgnoreCase(r.headers.get("connection"))) {
            close();
        }
        if (r.status >= 400) {
            throw new AgentException(r.status, errorMessage(r));
        }
        if (binary && !String.valueOf(r.headers.get("content-type")).startsWith(TensorCodec.CONTENT_TYPE)) {
            throw new AgentException(0, "the agent answered " + r.headers.get("content-type")
                    + " where " + TensorCodec.CONTENT_TYPE + " was expected");
        }
        return r;
    }

    private String address() {
        return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port;
    }

    private static String errorMessage(HttpConnection.Response r) {
        ByteBuffer b = r.body.duplicate();
        try {
            Object parsed = Json.parse(b);
            if (parsed instanceof Map && ((Map<?, ?>) parsed).get("error") instanceof String) {
                return (String) ((Map<?, ?>) parsed).get("error");
            }
            if (parsed instanceof Map) {
                return "";
            }
        } catch (IllegalArgumentException e) {
            // not JSON: the start of the text
        }
        byte[] raw = new byte[Math.min(200, b.remaining())];
        b.get(raw);
        return new String(raw, StandardCharsets.UTF_8);
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> object(Object answer) throws AgentException {
        if (!(answer instanceof Map)) {
            throw new AgentException(0, "the agent answered " + Json.write(answer) + " where an object was expected");
        }
        return (Map<String, Object>) answer;
    }

    private static String name(String model) {
        if (model == null || !MODEL_NAME.matcher(model).matches()) {
            throw new IllegalArgumentException("model name " + (model == null ? "null" : "'" + model + "'")
                    + ": printable ASCII without '/', '?', '#', '%' or spaces");
        }
        return model;
    }
}
