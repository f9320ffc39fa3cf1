package dev.orbit.sdk;

/** A request or wait ended because the worker is stopping (internal). */
final class CancelledException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  CancelledException() {
    super("cancelled", null, false, false);
  }
}
