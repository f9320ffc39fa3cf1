package dev.orbit.sdk;

/**
 * Implemented by contract types (usually records) that check themselves after decoding (an
 * input) or before reporting (an output). Throw any exception, an {@link
 * IllegalArgumentException} say, to refuse: a refused input fails the attempt as INVALID_INPUT, a
 * refused output as INVALID_OUTPUT; neither is retried.
 */
public interface Validated {
  void validate();
}
