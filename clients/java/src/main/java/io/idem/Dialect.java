package io.idem;

/** The SQL flavour of the database {@link Idem#run} talks to. */
public enum Dialect {
  /** Detect it from the connection's metadata (the default). */
  AUTO,
  /** PostgreSQL: the functions idem.claim_v1, idem.complete_v1, idem.fail_v1. */
  POSTGRES,
  /** MySQL and MariaDB: the procedures idem_sql_claim_v1, ... called with CALL. */
  MYSQL;

  /** The most bytes a fingerprint may have in this dialect's store. */
  public int maxFingerprintBytes() {
    return this == MYSQL ? Request.MAX_FINGERPRINT_BYTES_MYSQL : Request.MAX_FINGERPRINT_BYTES;
  }

  /** The dialect of a JDBC product name (DatabaseMetaData.getDatabaseProductName), or AUTO. */
  public static Dialect ofProductName(String product) {
    String p = product == null ? "" : product.toLowerCase(java.util.Locale.ROOT);
    if (p.contains("postgres")) {
      return POSTGRES;
    }
    if (p.contains("mysql") || p.contains("mariadb")) {
      return MYSQL;
    }
    return AUTO;
  }
}
