package io.idem;

/** What a claim found, or what {@link Idem#run} did. */
public enum Outcome {
  /** The caller holds the key (the SQL API's and the HTTP claim's answer). */
  ACQUIRED("acquired"),
  /** Finished before: the result is the stored one, byte for byte. */
  REPLAYED("replayed"),
  /** Another holder's lease is live. */
  IN_PROGRESS("in_progress"),
  /** The key belongs to another biz_type. */
  KEY_REUSED("key_reused"),
  /** The key was first used with another request. */
  FINGERPRINT_MISMATCH("fingerprint_mismatch"),
  /** Failed before, for good: the error is the stored failure. */
  CACHED_FAILURE("cached_failure"),
  /** The key's record was purged after its retention. */
  EXPIRED("expired"),
  /** Idem.run ran the body, and its result committed with the claim. */
  EXECUTED("executed"),
  /** Idem.run ran the body, it failed permanently, and the failure is now stored. */
  FAILED("failed");

  private final String wire;

  Outcome(String wire) { this.wire = wire; }

  /** The outcome's name in the SQL and HTTP APIs ("in_progress"). */
  public String wireName() { return wire; }

  /** The outcome of a wire name, or null for a name this client does not know. */
  public static Outcome ofWire(String name) {
    for (Outcome o : values()) {
      if (o.wire.equals(name)) {
        return o;
      }
    }
    return null;
  }

  @Override public String toString() { return wire; }
}
