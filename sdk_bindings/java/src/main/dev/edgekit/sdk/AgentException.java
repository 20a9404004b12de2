package dev.edgekit.sdk;

import java.io.IOException;

/**
 * A call to the agent failed. {@link #status()} is the HTTP status the agent answered (4xx, 5xx) with its
 * message in {@link #message()}, or 0 when no answer came: the agent could not be reached, the connection broke,
 * the answer was malformed, or (as the subclass {@link AgentTimeoutException}) the agent did not answer in time.
 */
public class AgentException extends IOException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String message;

    public AgentException(int status, String message) {
        this(status, message, null);
    }

    public AgentException(int status, String message, Throwable cause) {
        super(status > 0 ? "agent answered " + status + ": " + message : message, cause);
        this.status = status;
        this.message = message;
    }

    /** The HTTP status of the agent's answer, or 0 when there was none. */
    public int status() {
        return status;
    }

    /** The agent's error message (its {@code {"error": ...}}), or the SDK's own description when status is 0. */
    public String message() {
        return message;
    }
}
