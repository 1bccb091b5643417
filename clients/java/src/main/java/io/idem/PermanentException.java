package io.idem;

/**
 * Marks a body's failure as final for its key: {@link Idem#run} rolls the body's
 * work back, stores the failure (every later call answers cached_failure with it)
 * and answers {@link Outcome#FAILED}. Use it for a request that can never succeed
 * (a refund of an unknown order), not for a fault that may pass (a timeout).
 *
 * <p>The stored failure is {@link #failureJson()}: by default {@code {"error": message}};
 * pass the JSON to store with {@link #PermanentException(String, String)}.
 */
public class PermanentException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String failureJson;

  /** A permanent failure stored as {"error": message}. */
  public PermanentException(String message) {
    this(message, (Throwable) null);
  }

  /** Marks cause permanent; stored as {"error": cause's message}. */
  public PermanentException(String message, Throwable cause) {
    super(message, cause);
    this.failureJson = null;
  }

  /** A permanent failure stored as failureJson (one JSON value, checked). */
  public PermanentException(String message, String failureJson) {
    super(message);
    if (!Json.isValid(failureJson)) {
      throw IdemException.invalid("the failure JSON of a PermanentException is not valid JSON");
    }
    this.failureJson = failureJson;
  }

  /** The JSON Idem.run stores as the key's failure. */
  public String failureJson() {
    if (failureJson != null) {
      return failureJson;
    }
    StringBuilder b = new StringBuilder("{\"error\":");
    Json.quote(b, String.valueOf(getMessage()));
    return b.append('}').toString();
  }
}
