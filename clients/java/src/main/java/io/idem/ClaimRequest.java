package io.idem;

/**
 * The body of POST /v1/claims. leaseMs 0 is the server's default (30 000); waitMs
 * above 0 waits that long for a live holder instead of answering 409 (not in a batch).
 */
public record ClaimRequest(String bizType, String key, String fingerprint, int leaseMs,
                           int waitMs) {
  public ClaimRequest(String bizType, String key, String fingerprint) {
    this(bizType, key, fingerprint, 0, 0);
  }

  public ClaimRequest withLeaseMs(int ms) {
    return new ClaimRequest(bizType, key, fingerprint, ms, waitMs);
  }

  public ClaimRequest withWaitMs(int ms) {
    return new ClaimRequest(bizType, key, fingerprint, leaseMs, ms);
  }

  /** Checks every field (INVALID_REQUEST naming it). */
  void validate() {
    new Request(bizType, key, fingerprint).validate(Request.MAX_FINGERPRINT_BYTES);
    if (leaseMs != 0 && (leaseMs < 100 || leaseMs > 3_600_000)) {
      throw IdemException.invalid("lease_ms is " + leaseMs + ", outside 100..3600000");
    }
    if (waitMs < 0 || waitMs > 30_000) {
      throw IdemException.invalid("wait_ms is " + waitMs + ", outside 0..30000");
    }
  }

  /** The JSON members of the call, after "{" (op and the fields). */
  void writeMembers(StringBuilder b) {
    b.append("\"biz_type\":");
    Json.quote(b, bizType);
    b.append(",\"key\":");
    Json.quote(b, key);
    if (fingerprint != null && !fingerprint.isEmpty()) {
      b.append(",\"fingerprint\":");
      Json.quote(b, fingerprint);
    }
    if (leaseMs != 0) {
      b.append(",\"lease_ms\":").append(leaseMs);
    }
    if (waitMs != 0) {
      b.append(",\"wait_ms\":").append(waitMs);
    }
  }
}
