package dev.edgekit.sdk;

import java.util.Collections;
import java.util.Map;

/**
 * A decoded binary tensor message: its tensors by name (in the order of the message) and the metadata of its
 * header, every key but {@code "tensors"}. For an inference answer the metadata holds {@code model},
 * {@code version}, {@code inference_ms}, {@code queue_ms}, {@code batch} and {@code request_id}.
 */
public final class InferResult {
    private final Map<String, Tensor> outputs;
    private final Map<String, Object> meta;

    InferResult(Map<String, Tensor> outputs, Map<String, Object> meta) {
        this.outputs = Collections.unmodifiableMap(outputs);
        this.meta = Collections.unmodifiableMap(meta);
    }

    /** The tensors by name. */
    public Map<String, Tensor> outputs() {
        return outputs;
    }

    /** The tensor called {@code name}; throws {@link IllegalArgumentException} naming the ones there are. */
    public Tensor output(String name) {
        Tensor t = outputs.get(name);
        if (t == null) {
            throw new IllegalArgumentException("no output '" + name + "' (outputs: " + outputs.keySet() + ")");
        }
        return t;
    }

    /** The header's metadata (JSON values, see {@link Json}). */
    public Map<String, Object> meta() {
        return meta;
    }

    /** The model version that answered, or null. */
    public String version() {
        Object v = meta.get("version");
        return v instanceof String ? (String) v : null;
    }

    /** The agent's own inference time in milliseconds, or NaN when the header has none. */
    public double inferenceMs() {
        Object v = meta.get("inference_ms");
        return v instanceof Number ? ((Number) v).doubleValue() : Double.NaN;
    }

    /** The request's id (for {@link AgentClient#annotate}), or -1 when the header has none. */
    public long requestId() {
        Object v = meta.get("request_id");
        return v instanceof Long || v instanceof Integer ? ((Number) v).longValue() : -1;
    }

    @Override
    public String toString() {
        return "InferResult(outputs=" + outputs + ", meta=" + meta + ")";
    }
}
