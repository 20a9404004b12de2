package dev.edgekit.sdk;

import static dev.edgekit.sdk.SdkTest.check;
import static dev.edgekit.sdk.SdkTest.equal;
import static dev.edgekit.sdk.SdkTest.raises;
import static dev.edgekit.sdk.SdkTest.test;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

final class ClientTests {
    private ClientTests() {
    }

    /** Answers every request of every connection with {@code json}. */
    static FakeAgent answering(String json) throws Exception {
        return new FakeAgent((conn, i) -> {
            while (conn.read() != null) {
                conn.json(200, json);
            }
        });
    }

    static void run(File scratch) {
        test("local(root) reads the agent's port and token from its root", () -> {
            try (FakeAgent agent = answering("{\"status\": \"ok\"}")) {
                File root = new File(scratch, "root");
                File dir = new File(root, "agent");
                check(dir.mkdirs(), "made " + dir);
                write(new File(dir, "state.json"), "{\"pid\": 1, \"port\": " + agent.port() + "}");
                write(new File(dir, "token"), "tok-123\n");
                try (AgentClient client = AgentClient.local(root.getPath())) {
                    equal(client.host(), "127.0.0.1");
                    equal(client.port(), agent.port());
                    client.health();
                }
                String head = agent.requests.get(0).head;
                boolean fromEnv = System.getenv("EDGEKIT_AGENT_TOKEN") != null
                        && !System.getenv("EDGEKIT_AGENT_TOKEN").isEmpty();
                check(fromEnv || head.contains("\r\nAuthorization: Bearer tok-123\r\n"), head);
                check(new File(dir, "token").delete(), "token removed");
                try (AgentClient client = AgentClient.local(root.getPath())) {
                    client.health(); // no token file: reads still work on loopback
                }
                check(fromEnv || !agent.requests.get(1).head.contains("Authorization"), agent.requests.get(1).head);
                AgentException e = raises(AgentException.class, "state.json",
                        () -> AgentClient.local(new File(scratch, "nothing").getPath()));
                equal(e.status(), 0);
            }
        });
        test("a call sends one well-formed request and parses the answer", () -> {
            try (FakeAgent agent = answering("{\"status\": \"ok\", \"models\": [\"tiny\"]}");
                    AgentClient client = new AgentClient("127.0.0.1", agent.port(), "s3cret")) {
                Map<String, Object> health = client.health();
                equal(health.get("status"), "ok");
                String head = agent.requests.get(0).head;
                check(head.startsWith("GET /v1/health HTTP/1.1\r\n"), head);
                check(head.contains("\r\nHost: 127.0.0.1:" + agent.port() + "\r\n"), head);
                check(head.contains("\r\nAuthorization: Bearer s3cret\r\n"), head);
                check(head.contains("\r\nContent-Length: 0\r\n"), head);
            }
        });
        test("no token, no Authorization header; JSON bodies for load, unload, annotate", () -> {
            try (FakeAgent agent = answering("{\"models\": [{\"name\": \"tiny\"}]}");
                    AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                List<Map<String, Object>> models = client.models();
                equal(models.get(0).get("name"), "tiny");
                client.load("tiny", 2, Arrays.asList("CPUExecutionProvider"), null);
                client.unload("tiny");
                client.annotate(42, 1.5, null);
                equal(agent.accepted(), 1); // one kept-alive connection for all four
                check(!agent.requests.get(0).head.contains("Authorization"), "no token sent");
                equal(body(agent, 1), "{\"threads\":2,\"providers\":[\"CPUExecutionProvider\"],\"warmup\":null}");
                check(agent.requests.get(1).head.startsWith("POST /v1/models/tiny/load HTTP/1.1"), "load path");
                equal(body(agent, 2), "{}");
                equal(body(agent, 3), "{\"request_id\":42,\"pre_ms\":1.5,\"post_ms\":null}");
            }
        });
        test("the agent's error status and message surface as AgentException", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> {
                conn.read();
                conn.json(400, "{\"error\": \"input 'x': expected shape [1, 3]\", \"status\": 400}");
                conn.read();
                conn.answer(502, "text/html", "<h1>bad gateway</h1>".getBytes(StandardCharsets.UTF_8), "");
            }); AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                AgentException e = raises(AgentException.class, "agent answered 400", () -> client.load("tiny"));
                equal(e.status(), 400);
                equal(e.message(), "input 'x': expected shape [1, 3]");
                e = raises(AgentException.class, "502", () -> client.health());
                equal(e.message(), "<h1>bad gateway</h1>");
            }
        });
        test("a kept-alive connection the agent closed is replaced once", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> {
                conn.read();
                conn.json(200, "{\"n\": " + i + "}");
                conn.socket.close(); // as an agent does after its keep-alive timeout
            }); AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                equal(client.health().get("n"), 0L);
                Thread.sleep(50);
                equal(client.health().get("n"), 1L);
                equal(client.health().get("n"), 2L);
                equal(agent.accepted(), 3);
            }
        });
        test("a new connection that fails is not retried: status 0", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> conn.socket.close());
                    AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                AgentException e = raises(AgentException.class, "failed", () -> client.health());
                equal(e.status(), 0);
                check(!(e instanceof AgentTimeoutException), "not a timeout");
                equal(agent.accepted(), 1);
            }
        });
        test("Connection: close in an answer closes the client's connection", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> {
                conn.read();
                conn.answer(200, "application/json", "{}".getBytes(StandardCharsets.UTF_8), "Connection: close\r\n");
                conn.read();
            }); AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                client.health();
                client.health();
                equal(agent.accepted(), 2);
            }
        });
        test("no answer in time: AgentTimeoutException with status 0", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> {
                conn.read();
                Thread.sleep(5000);
            }); AgentClient client = new AgentClient("127.0.0.1", agent.port(), null, 1000, 200)) {
                long t0 = System.nanoTime();
                AgentTimeoutException e = raises(AgentTimeoutException.class, "in time", () -> client.health());
                equal(e.status(), 0);
                check(System.nanoTime() - t0 < 3_000_000_000L, "gave up after the timeout");
            }
        });
        test("nothing listening: status 0 naming the address", () -> {
            int port;
            try (ServerSocket s = new ServerSocket(0)) {
                port = s.getLocalPort();
            }
            AgentClient client = new AgentClient("127.0.0.1", port, null);
            AgentException e = raises(AgentException.class, "127.0.0.1:" + port, () -> client.health());
            equal(e.status(), 0);
        });
        test("infer sends binary tensors and decodes the answer, small and large", () -> {
            try (FakeAgent agent = new FakeAgent((conn, i) -> {
                for (FakeAgent.Request r; (r = conn.read()) != null;) {
                    check(r.head.contains("Content-Type: " + TensorCodec.CONTENT_TYPE + "\r\n"), r.head);
                    InferResult in = TensorCodec.decode(ByteBuffer.wrap(r.body));
                    Map<String, Object> meta = new LinkedHashMap<String, Object>();
                    meta.put("version", "v1");
                    meta.put("request_id", 7);
                    ByteBuffer out = TensorCodec.encode(in.outputs(), meta);
                    byte[] bytes = new byte[out.remaining()];
                    out.get(bytes);
                    conn.answer(200, TensorCodec.CONTENT_TYPE, bytes, "");
                }
            }); AgentClient client = new AgentClient("127.0.0.1", agent.port(), null)) {
                for (int n : new int[] {3, 1 << 20}) {
                    float[] values = new float[n];
                    for (int k = 0; k < n; k++) {
                        values[k] = k * 0.5f;
                    }
                    Map<String, Tensor> inputs = new LinkedHashMap<String, Tensor>();
                    inputs.put("x", Tensor.ofFloat32(values, 1, n));
                    inputs.put("ids", Tensor.ofInt64(new long[] {5}, 1));
                    InferResult r = client.infer("tiny", inputs);
                    equal(r.outputs(), inputs);
                    equal(r.version(), "v1");
                    equal(r.requestId(), 7L);
                }
                equal(agent.accepted(), 1);
            }
        });
        test("bad model names and addresses are refused before anything is sent", () -> {
            AgentClient client = new AgentClient("127.0.0.1", 1, null);
            raises(IllegalArgumentException.class, "model name", () -> client.load("a/b"));
            raises(IllegalArgumentException.class, "model name", () -> client.load("a b"));
            raises(IllegalArgumentException.class, "port", () -> new AgentClient("h", 0, null));
            raises(IllegalArgumentException.class, "line break", () -> new AgentClient("h", 1, "a\nb"));
        });
    }

    private static void write(File file, String text) throws IOException {
        try (FileOutputStream out = new FileOutputStream(file)) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        }
    }

    private static String body(FakeAgent agent, int i) {
        return new String(agent.requests.get(i).body, StandardCharsets.UTF_8);
    }
}
