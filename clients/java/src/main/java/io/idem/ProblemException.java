package io.idem;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;

/**
 * An error answer of {@code idem serve} (application/problem+json, RFC 9457), or no
 * answer at all (status 0: the connection failed; the cause is the transport's
 * error). {@link #kind()} names the outcome or problem; 5xx answers and failed
 * connections are UNAVAILABLE.
 */
public final class ProblemException extends IdemException {
  private static final long serialVersionUID = 1L;

  private final int status;
  private final String type;
  private final String title;
  private final String detail;
  private final String outcome;
  private final String requestId;
  private final Duration retryAfter;
  private final Instant leaseUntil;
  private final String body;
  private final int attempts;

  ProblemException(Kind kind, int status, String type, String title, String detail,
                   String outcome, String requestId, Duration retryAfter, Instant leaseUntil,
                   String body, int attempts, Throwable cause) {
    super(kind, message(status, type, title, detail, outcome, requestId), cause);
    this.status = status;
    this.type = type;
    this.title = title;
    this.detail = detail;
    this.outcome = outcome;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
    this.leaseUntil = leaseUntil;
    this.body = body;
    this.attempts = attempts;
  }

  private static String message(int status, String type, String title, String detail,
                                String outcome, String requestId) {
    StringBuilder b = new StringBuilder("idem: ");
    if (status != 0) {
      b.append(status).append(' ');
    }
    String name = outcome;
    if ((name == null || name.isEmpty()) && type != null && type.startsWith(PREFIX)) {
      name = type.substring(PREFIX.length());
    }
    if (name == null || name.isEmpty()) {
      name = title;
    }
    if (name != null && !name.isEmpty()) {
      b.append(name).append(": ");
    }
    b.append(detail == null ? "" : detail);
    if (requestId != null && !requestId.isEmpty()) {
      b.append(" (request id ").append(requestId).append(')');
    }
    return b.toString();
  }

  private static final String PREFIX = "urn:idem:problem:";

  /** The problem an answer's body (JSON problem or anything else) describes. */
  static ProblemException of(int status, String body, String requestId, Duration retryAfter,
                             int attempts) {
    String type = "about:blank";
    String title = "HTTP " + status;
    String detail = null;
    String outcome = null;
    Instant leaseUntil = null;
    try {
      JsonObject o = JsonObject.parse(body);
      if (o.string("type") != null) {
        type = o.string("type");
        title = o.string("title");
        detail = o.string("detail");
        outcome = o.string("outcome");
        leaseUntil = o.time("lease_until");
      }
    } catch (Json.SyntaxException e) {
      // not a problem: the status and the start of the body tell what happened
    }
    if (detail == null && type.equals("about:blank")) {
      detail = body.length() > 200 ? body.substring(0, 200) : body;
    }
    Kind kind = Kind.ofSlug(outcome);
    if (kind == Kind.OTHER && type.startsWith(PREFIX)) {
      kind = Kind.ofSlug(type.substring(PREFIX.length()));
    }
    if (kind == Kind.OTHER && (status == 502 || status == 503 || status == 504)) {
      kind = Kind.UNAVAILABLE;
    }
    return new ProblemException(kind, status, type, title, detail, outcome, requestId,
        retryAfter, leaseUntil, body, attempts, null);
  }

  /** A call that got no answer. */
  static ProblemException noAnswer(String requestId, Throwable cause, int attempts) {
    return new ProblemException(Kind.UNAVAILABLE, 0, "about:blank", "No answer",
        String.valueOf(cause), null, requestId, null, null, null, attempts, cause);
  }

  ProblemException withAttempts(int n) {
    return new ProblemException(kind(), status, type, title, detail, outcome, requestId,
        retryAfter, leaseUntil, body, n, getCause());
  }

  /** The HTTP status; 0 when no answer arrived. */
  public int status() { return status; }

  /** "urn:idem:problem:&lt;slug&gt;" or "about:blank". */
  public String type() { return type; }

  public String title() { return title; }

  public String detail() { return detail; }

  /** The guard outcome the answer reports ("in_progress", ...), or null. */
  public String outcome() { return outcome; }

  /** The answer's X-Request-Id, else the one the client sent. */
  public String requestId() { return requestId; }

  /** The answer's Retry-After (in_progress, 503), null when absent. */
  public Duration retryAfter() { return retryAfter; }

  /** The live holder's lease end of an in_progress answer, else null. */
  public Instant leaseUntil() { return leaseUntil; }

  /** The problem body as received (null when none arrived). */
  public String body() { return body; }

  /** How many times the call was sent. */
  public int attempts() { return attempts; }

  /** The problem's idem name ("lease_lost"), or null for about:blank. */
  public String slug() {
    return type != null && type.startsWith(PREFIX) ? type.substring(PREFIX.length()) : null;
  }

  /** The same call may be sent again unchanged: nothing ran. */
  public boolean retryable() {
    return status == 0 || status == 502 || status == 503 || status == 504;
  }

  static String utf8(byte[] b) {
    return new String(b, StandardCharsets.UTF_8);
  }
}
