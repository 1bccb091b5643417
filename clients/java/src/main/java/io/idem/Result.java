package io.idem;

import java.time.Instant;

/**
 * What {@link Idem#run} answers for a key.
 *
 * @param outcome what happened
 * @param result the body's result (EXECUTED) or the stored one (REPLAYED), JSON text
 *     byte for byte; null otherwise
 * @param error the stored failure (FAILED, CACHED_FAILURE), JSON text; null otherwise
 * @param token the record's fencing token (IN_PROGRESS: the holder's)
 * @param expiresAt when the key's record may be purged; null: kept for ever
 * @param leaseUntil when the holder's lease ends (IN_PROGRESS), else null
 * @param takeover an earlier holder's lease had expired and was taken over
 * @param attempts the transactions Idem.run began (more than 1 after transient faults)
 */
public record Result(Outcome outcome, String result, String error, long token,
                     Instant expiresAt, Instant leaseUntil, boolean takeover, int attempts) {
  Result withAttempts(int n) {
    return new Result(outcome, result, error, token, expiresAt, leaseUntil, takeover, n);
  }

  Result withOutcome(Outcome o) {
    return new Result(o, result, error, token, expiresAt, leaseUntil, takeover, attempts);
  }

  /** Whether the key is done with a result (EXECUTED or REPLAYED). */
  public boolean succeeded() {
    return outcome == Outcome.EXECUTED || outcome == Outcome.REPLAYED;
  }
}
