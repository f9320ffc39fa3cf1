package dev.orbit.sdk;

/**
 * A value does not fit a task contract: it could not be decoded into the contract's type, or its
 * {@link Validated#validate()} refused it.
 */
public class ValidationException extends OrbitException {
  private static final long serialVersionUID = 1L;

  private final String what;

  public ValidationException(String what, Throwable cause) {
    super("invalid " + what + ": " + messageOf(cause), cause);
    this.what = what;
  }

  /** What was checked ({@code "payments.charge input"}). */
  public String what() {
    return what;
  }

  private static String messageOf(Throwable t) {
    return t.getMessage() == null ? t.toString() : t.getMessage();
  }
}
