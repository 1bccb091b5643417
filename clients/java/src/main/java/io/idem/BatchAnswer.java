package io.idem;

/**
 * One item's answer in a batch: the single call's HTTP status and JSON body (the
 * body's text as sent, a problem's members for an error).
 */
public record BatchAnswer(int status, String outcome, String body) {
  /** Whether the item succeeded (a 2xx status). */
  public boolean ok() { return status >= 200 && status < 300; }

  /** The answer as a claim (for a claim item that succeeded). */
  public Claim claim() {
    Claim c = Claim.of(body, false);
    boolean replayed = c.outcome() == Outcome.REPLAYED || c.outcome() == Outcome.CACHED_FAILURE;
    return replayed ? Claim.of(body, true) : c;
  }

  /** The answer as the error the single call would have thrown (for status >= 400). */
  public ProblemException problem() {
    return ProblemException.of(status, body, null, null, 1);
  }
}
