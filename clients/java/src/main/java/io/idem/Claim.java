package io.idem;

import java.time.Instant;

/**
 * A claim's answer: ACQUIRED (201: hold token until leaseUntil), REPLAYED (200:
 * result) or CACHED_FAILURE (200: error). result and error are JSON text exactly as
 * the server sent it.
 *
 * @param takeover an expired holder's lease was taken over
 * @param previousToken that holder's token
 * @param degraded fail-open: nothing was recorded
 * @param replayed the answer carried Idempotent-Replayed: true
 */
public record Claim(Outcome outcome, long token, Instant leaseUntil, boolean takeover,
                    long previousToken, boolean degraded, Instant expiresAt, String result,
                    String error, boolean replayed) {
  static Claim of(String body, boolean replayed) {
    JsonObject o = JsonObject.parse(body);
    Outcome outcome = Outcome.ofWire(o.string("outcome"));
    if (outcome == null) {
      throw new Json.SyntaxException("the claim answer's outcome '" + o.string("outcome")
          + "' is not one this client knows");
    }
    return new Claim(outcome, o.number("token"), o.time("lease_until"), o.bool("takeover"),
        o.number("previous_token"), o.bool("degraded"), o.time("expires_at"),
        o.raw("result"), o.raw("error"), replayed);
  }
}
