package io.idem;

import java.time.Instant;

/**
 * A key's record (GET /v1/records/{biz_type}/{key}); a {@link RecordPage}'s records
 * have no result or error. state is PROCESSING, SUCCEEDED or FAILED; result and
 * error are JSON text as sent.
 */
public record Record(String bizType, String key, String state, long token, Instant leaseUntil,
                     String fingerprint, Instant createdAt, Instant updatedAt, Instant expiresAt,
                     String result, String error) {
  static Record of(JsonObject o) {
    return new Record(o.string("biz_type"), o.string("key"), o.string("state"),
        o.number("token"), o.time("lease_until"), o.string("fingerprint"),
        o.time("created_at"), o.time("updated_at"), o.time("expires_at"), o.raw("result"),
        o.raw("error"));
  }
}
