package dev.edgekit.sdk;

/** Bytes that are not a valid binary tensor message, or tensors that cannot be encoded as one (status 0). */
public class WireException extends AgentException {
    private static final long serialVersionUID = 1L;

    public WireException(String message) {
        super(0, message, null);
    }
}
