package dev.orbit.sdk;

/** The base of every exception of the ORBIT SDK (unchecked). */
public class OrbitException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public OrbitException(String message) {
    super(message);
  }

  public OrbitException(String message, Throwable cause) {
    super(message, cause);
  }
}
