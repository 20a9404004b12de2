package dev.edgekit.sdk.contract;

import dev.edgekit.sdk.AgentClient;
import dev.edgekit.sdk.AgentException;
import dev.edgekit.sdk.DType;
import dev.edgekit.sdk.InferResult;
import dev.edgekit.sdk.Json;
import dev.edgekit.sdk.Tensor;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The SDK contract suite's runner: {@code ContractRunner SCENARIO.json} runs the scenario's steps with the Java SDK
 * and prints one JSON document, {@code {"results": [...]}}, one entry per step: {@code {"ok": true, "result": ...}}
 * or {@code {"ok": false, "status": HTTP status or 0, "message": ...}}. It exits 0 even when steps failed.
 */
public final class ContractRunner {
    private final String host;
    private final int port;
    private final Object token;
    private final Map<String, AgentClient> clients = new HashMap<String, AgentClient>();

    private ContractRunner(Map<?, ?> scenario) {
        host = (String) scenario.get("host");
        port = (int) (long) (Long) scenario.get("port");
        token = scenario.get("token");
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 1) {
            System.err.println("usage: ContractRunner SCENARIO.json");
            System.exit(2);
        }
        Map<?, ?> scenario = (Map<?, ?>) Json.parse(Files.readAllBytes(Paths.get(args[0])));
        ContractRunner runner = new ContractRunner(scenario);
        List<Object> results = new ArrayList<Object>();
        try {
            for (Object step : (List<?>) scenario.get("steps")) {
                results.add(runner.step((Map<?, ?>) step));
            }
        } finally {
            for (AgentClient c : runner.clients.values()) {
                c.close();
            }
        }
        Map<String, Object> doc = new LinkedHashMap<String, Object>();
        doc.put("results", results);
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        out.println(Json.write(doc));
        out.flush();
    }

    private Map<String, Object> step(Map<?, ?> step) {
        Map<String, Object> entry = new LinkedHashMap<String, Object>();
        try {
            Object result = run(step);
            entry.put("ok", true);
            entry.put("result", result);
        } catch (AgentException e) {
            entry.put("ok", false);
            entry.put("status", (long) e.status());
            entry.put("message", e.message());
        } catch (RuntimeException e) {
            entry.put("ok", false);
            entry.put("status", 0L);
            entry.put("message", String.valueOf(e.getMessage()));
        }
        return entry;
    }

    private Object run(Map<?, ?> step) throws AgentException {
        AgentClient client = client(step.containsKey("token") ? step.get("token") : token);
        String op = (String) step.get("op");
        String model = (String) step.get("model");
        switch (op) {
            case "health":
                return client.health();
            case "models":
                return client.models();
            case "load":
                return client.load(model);
            case "unload":
                return client.unload(model);
            case "annotate": {
                Map<String, Object> body = new LinkedHashMap<String, Object>();
                body.put("request_id", step.get("request_id"));
                body.put("pre_ms", step.get("pre_ms"));
                body.put("post_ms", step.get("post_ms"));
                if (step.get("request_id") instanceof Long && numberOrNull(step.get("pre_ms"))
                        && numberOrNull(step.get("post_ms"))) { // the SDK's typed call; anything else as it came
                    return client.annotate((Long) step.get("request_id"), number(step.get("pre_ms")),
                            number(step.get("post_ms")));
                }
                return client.request("POST", "/v1/telemetry/annotate", body);
            }
            case "infer": {
                InferResult r = client.infer(model, inputs(step));
                Map<String, Object> outputs = new LinkedHashMap<String, Object>();
                for (Map.Entry<String, Tensor> e : r.outputs().entrySet()) {
                    outputs.put(e.getKey(), tensor(e.getValue()));
                }
                Map<String, Object> result = new LinkedHashMap<String, Object>();
                result.put("outputs", outputs);
                result.put("meta", r.meta());
                return result;
            }
            case "infer_loop":
                return inferLoop(client, model, inputs(step), count(step, "count", 0));
            case "overhead":
                return overhead(client, model, inputs(step), count(step, "runs", 0), count(step, "warmup", 10));
            default:
                throw new IllegalArgumentException("unknown op " + Json.write(op));
        }
    }

    private static Map<String, Object> inferLoop(AgentClient client, String model, Map<String, Tensor> inputs,
            long count) {
        long ok = 0;
        List<Object> errors = new ArrayList<Object>();
        List<Object> versions = new ArrayList<Object>();
        for (long i = 0; i < count; i++) {
            try {
                InferResult r = client.infer(model, inputs);
                ok++;
                Object v = r.meta().get("version");
                if (!versions.contains(v)) {
                    versions.add(v);
                }
            } catch (AgentException e) {
                errors.add(e.message());
            }
        }
        Map<String, Object> result = new LinkedHashMap<String, Object>();
        result.put("ok", ok);
        result.put("errors", errors);
        result.put("versions", versions);
        return result;
    }

    private static Map<String, Object> overhead(AgentClient client, String model, Map<String, Tensor> inputs,
            long runs, long warmup) throws AgentException {
        for (long i = 0; i < warmup; i++) {
            client.infer(model, inputs);
        }
        List<Object> clientMs = new ArrayList<Object>();
        List<Object> inferenceMs = new ArrayList<Object>();
        for (long i = 0; i < runs; i++) {
            long t0 = System.nanoTime();
            InferResult r = client.infer(model, inputs);
            long t1 = System.nanoTime();
            clientMs.add((t1 - t0) / 1e6);
            inferenceMs.add(r.meta().get("inference_ms"));
        }
        Map<String, Object> result = new LinkedHashMap<String, Object>();
        result.put("client_ms", clientMs);
        result.put("inference_ms", inferenceMs);
        return result;
    }

    private AgentClient client(Object stepToken) {
        if (stepToken != null && !(stepToken instanceof String)) {
            throw new IllegalArgumentException("a step's token is a string or null");
        }
        String key = stepToken == null ? "\u0000none" : (String) stepToken;
        AgentClient c = clients.get(key);
        if (c == null) {
            c = new AgentClient(host, port, (String) stepToken);
            clients.put(key, c);
        }
        return c;
    }

    private static Map<String, Tensor> inputs(Map<?, ?> step) {
        Map<String, Tensor> inputs = new LinkedHashMap<String, Tensor>();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) step.get("inputs")).entrySet()) {
            Map<?, ?> t = (Map<?, ?>) e.getValue();
            DType dtype = DType.fromWireName((String) t.get("dtype"));
            if (dtype == null) {
                throw new IllegalArgumentException("input " + e.getKey() + ": unknown dtype " + t.get("dtype"));
            }
            List<?> dims = (List<?>) t.get("shape");
            long[] shape = new long[dims.size()];
            for (int i = 0; i < shape.length; i++) {
                shape[i] = (Long) dims.get(i);
            }
            byte[] raw = Base64.getDecoder().decode((String) t.get("b64"));
            inputs.put((String) e.getKey(), Tensor.fromBytes(dtype, raw, shape));
        }
        return inputs;
    }

    private static Map<String, Object> tensor(Tensor t) {
        List<Object> shape = new ArrayList<Object>();
        for (long d : t.shape()) {
            shape.add(d);
        }
        Map<String, Object> out = new LinkedHashMap<String, Object>();
        out.put("dtype", t.dtype().wireName());
        out.put("shape", shape);
        out.put("b64", new String(Base64.getEncoder().encode(t.toBytes()), StandardCharsets.US_ASCII));
        return out;
    }

    private static long count(Map<?, ?> step, String key, long absent) {
        Object v = step.get(key);
        return v instanceof Long ? (Long) v : absent;
    }

    private static boolean numberOrNull(Object v) {
        return v == null || v instanceof Number;
    }

    private static Double number(Object v) {
        return v instanceof Number ? ((Number) v).doubleValue() : null;
    }
}
