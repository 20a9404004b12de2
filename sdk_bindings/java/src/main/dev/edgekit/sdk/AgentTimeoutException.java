package dev.edgekit.sdk;

/** The agent did not accept the connection, or did not answer, within the client's timeout (status 0). */
public class AgentTimeoutException extends AgentException {
    private static final long serialVersionUID = 1L;

    public AgentTimeoutException(String message, Throwable cause) {
        super(0, message, cause);
    }
}
