package io.idem;

import java.time.Duration;

/**
 * Options of {@link Idem#run}: an immutable value, each {@code with...} a changed copy.
 *
 * @param dialect the database's dialect; AUTO detects it from the connection's metadata
 * @param retry attempts and backoff after transient store faults
 * @param retention how long the key's record is kept after its first claim (then
 *     {@code idem purge} may remove it, leaving a tombstone that answers EXPIRED);
 *     null keeps it for ever. Whole seconds, rounded up
 * @param tenant the tenant of the key; "default" is the SQL API's default
 */
public record Options(Dialect dialect, Retry retry, Duration retention, String tenant) {
  /** Detected dialect, {@link Retry#DEFAULT}, kept for ever, tenant "default". */
  public static final Options DEFAULTS = new Options(Dialect.AUTO, Retry.DEFAULT, null, "default");

  public Options {
    if (dialect == null || retry == null) {
      throw new IllegalArgumentException("Options: dialect and retry must not be null");
    }
  }

  public Options withDialect(Dialect d) { return new Options(d, retry, retention, tenant); }

  public Options withRetry(Retry r) { return new Options(dialect, r, retention, tenant); }

  public Options withRetention(Duration d) { return new Options(dialect, retry, d, tenant); }

  public Options withTenant(String t) { return new Options(dialect, retry, retention, t); }

  /** Checks retention and tenant (INVALID_REQUEST naming the field). */
  void validate() {
    Request.checkName("tenant", tenant, Request.MAX_TENANT_BYTES);
    if (retention != null && (retention.isNegative() || retention.isZero())) {
      throw IdemException.invalid("retention must be positive, got " + retention);
    }
  }

  /** The retention in whole seconds rounded up, or null. */
  Long retentionSeconds() {
    if (retention == null) {
      return null;
    }
    long s = retention.getSeconds();
    return retention.getNano() > 0 ? s + 1 : s;
  }
}
