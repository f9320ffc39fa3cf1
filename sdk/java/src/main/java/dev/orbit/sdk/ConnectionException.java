package dev.orbit.sdk;

/**
 * The runtime could not be reached: the connection was refused or dropped, the answer could not
 * be read, or the request timed out.
 */
public class ConnectionException extends OrbitException {
  private static final long serialVersionUID = 1L;

  private final String server;
  private final String reason;

  public ConnectionException(String server, String reason, Throwable cause) {
    super("cannot reach ORBIT runtime at " + server + ": " + reason, cause);
    this.server = server;
    this.reason = reason;
  }

  public String server() {
    return server;
  }

  public String reason() {
    return reason;
  }
}
