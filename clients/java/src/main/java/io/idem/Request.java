package io.idem;

import java.nio.charset.StandardCharsets;

/**
 * One operation: its key within a biz_type, and the fingerprint of its payload (a
 * retry must carry the same one; null or "" for none).
 */
public record Request(String bizType, String key, String fingerprint) {
  /** The bounds the store checks (and the clients check first, naming the field). */
  public static final int MAX_KEY_BYTES = 255;
  public static final int MAX_BIZ_TYPE_BYTES = 255;
  public static final int MAX_TENANT_BYTES = 255;
  /** A fingerprint's bound on PostgreSQL and idem serve. */
  public static final int MAX_FINGERPRINT_BYTES = 1024;
  /** A fingerprint's bound on MySQL/MariaDB (the column's size). */
  public static final int MAX_FINGERPRINT_BYTES_MYSQL = 255;

  /** A request without a fingerprint. */
  public Request(String bizType, String key) {
    this(bizType, key, null);
  }

  /** Checks every field against the bounds of idem serve and PostgreSQL (fingerprint 1024). */
  public void validate() {
    validate(MAX_FINGERPRINT_BYTES);
  }

  /** Checks every field, the fingerprint against maxFingerprintBytes. */
  public void validate(int maxFingerprintBytes) {
    checkName("biz_type", bizType, MAX_BIZ_TYPE_BYTES);
    checkName("key", key, MAX_KEY_BYTES);
    checkFingerprint(fingerprint, maxFingerprintBytes);
  }

  static void checkFingerprint(String fingerprint, int max) {
    if (fingerprint == null || fingerprint.isEmpty()) {
      return;
    }
    String p = textProblem("fingerprint", fingerprint);
    if (p != null) {
      throw IdemException.invalid(p);
    }
    int n = fingerprint.getBytes(StandardCharsets.UTF_8).length;
    if (n > max) {
      throw IdemException.invalid(
          "fingerprint is " + n + " bytes, over the limit of " + max);
    }
  }

  /** Throws INVALID_REQUEST naming `what` when v is not a valid biz_type, key or tenant. */
  static void checkName(String what, String v, int max) {
    if (v == null) {
      throw IdemException.invalid(what + " is null");
    }
    if (v.isEmpty()) {
      throw IdemException.invalid(what + " is empty");
    }
    String p = textProblem(what, v);
    if (p != null) {
      throw IdemException.invalid(p);
    }
    int n = v.getBytes(StandardCharsets.UTF_8).length;
    if (n > max) {
      throw IdemException.invalid(what + " is " + n + " bytes, over the limit of " + max);
    }
  }

  /** What keeps v from being UTF-8 text without NUL, or null. */
  private static String textProblem(String what, String v) {
    for (int i = 0; i < v.length(); i++) {
      char c = v.charAt(i);
      if (c == 0) {
        return what + " holds a NUL character at index " + i;
      }
      if (Character.isHighSurrogate(c) && i + 1 < v.length()
          && Character.isLowSurrogate(v.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return what + " is not UTF-8 (a lone surrogate at index " + i + ")";
      }
    }
    return null;
  }
}
