package io.idem;

/**
 * An error of idem's clients, with the {@link Kind} a caller switches on. Idem.run
 * throws it for a request refused before any I/O ({@link Kind#INVALID_REQUEST}, the
 * message names the field) and for a store it gave up on ({@link Kind#UNAVAILABLE},
 * the cause is the driver's last error); the HTTP client throws its subclass
 * {@link ProblemException}.
 */
public class IdemException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The kinds of error, named as the APIs name them. */
  public enum Kind {
    /** The key belongs to another biz_type. Do not retry. */
    KEY_REUSED("key_reused"),
    /** The key was first used with another request. Do not retry. */
    FINGERPRINT_MISMATCH("fingerprint_mismatch"),
    /** The key's record was purged after its retention; a request this late is not run. */
    EXPIRED("expired"),
    /** Another holder's lease on the key is live (HTTP client; Idem.run answers an outcome). */
    IN_PROGRESS("in_progress"),
    /** The token is not the current holder's (taken over or released). */
    LEASE_LOST("lease_lost"),
    /** The claim already ended with other content. */
    CONFLICT("conflict"),
    /** No record of the key (in the caller's tenant). */
    NOT_FOUND("not_found"),
    /** The store or server could not be reached or kept failing; nothing was recorded. */
    UNAVAILABLE("unavailable"),
    /** A value of the request is out of range (named in the message). */
    INVALID_REQUEST("invalid_request"),
    /** Any other error answer (unauthorized, too large, ...). */
    OTHER("other");

    private final String slug;

    Kind(String slug) { this.slug = slug; }

    /** The problem's name in the APIs ("lease_lost"). */
    public String slug() { return slug; }

    /** The kind of an outcome or problem name; OTHER for an unknown one. */
    public static Kind ofSlug(String slug) {
      if ("store_unavailable".equals(slug)) {
        return UNAVAILABLE;
      }
      for (Kind k : values()) {
        if (k.slug.equals(slug)) {
          return k;
        }
      }
      return OTHER;
    }
  }

  private final Kind kind;

  public IdemException(Kind kind, String message) {
    this(kind, message, null);
  }

  public IdemException(Kind kind, String message, Throwable cause) {
    super(message, cause);
    this.kind = kind;
  }

  /** What went wrong. */
  public Kind kind() { return kind; }

  /** An INVALID_REQUEST error: "idem: invalid_request: " + what. */
  static IdemException invalid(String what) {
    return new IdemException(Kind.INVALID_REQUEST, "idem: invalid_request: " + what);
  }
}
