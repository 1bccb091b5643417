package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Idem.run against PostgreSQL and MariaDB (each test on both). */
@Tag("sql")
class SqlTest {
  static void ledger(Connection c, String key) throws SQLException {
    try (PreparedStatement ps = c.prepareStatement(
        "INSERT INTO ledger (refund_key, refund_id, amount) VALUES (?, 'F', 100)")) {
      ps.setString(1, key);
      ps.executeUpdate();
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void runsOnceRestoresAutocommitAndDetectsTheDialect(String env) throws Exception {
    try (TestDb d = TestDb.open(env); Connection c = d.connect()) {
      d.createLedger();
      assertEquals(d.dialect, SqlApi.detect(c));
      Request req = new Request("refund", "R-1", Idem.fingerprintJson("{\"amount\":100}"));
      String stored = "{\"refund_id\": \"F-1\",  \"amount\": 12.50}";
      Result r = Idem.run(c, req, cx -> {
        ledger(cx, "R-1");
        return stored;
      });
      assertEquals(Outcome.EXECUTED, r.outcome());
      assertEquals(stored, r.result());
      assertEquals(1, r.attempts());
      assertNull(r.expiresAt());
      assertTrue(c.getAutoCommit());
      Result again = Idem.run(c, req, cx -> "{\"other\":1}");
      assertEquals(Outcome.REPLAYED, again.outcome());
      assertEquals(stored, again.result()); // byte for byte
      // With autocommit off, it stays off, and nothing is left open.
      c.setAutoCommit(false);
      Result off = Idem.run(c, new Request("refund", "R-2"), cx -> null);
      assertEquals("null", off.result());
      assertFalse(c.getAutoCommit());
      c.setAutoCommit(true);
      assertEquals(1, d.count("SELECT COUNT(*) FROM ledger"));
      assertEquals(0, d.processing());
      // Fingerprint, biz_type: outcomes, not exceptions.
      assertEquals(Outcome.FINGERPRINT_MISMATCH,
          Idem.run(c, new Request("refund", "R-1", "other"), cx -> "1").outcome());
      assertEquals(Outcome.KEY_REUSED,
          Idem.run(c, new Request("payout", "R-1"), cx -> "1").outcome());
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void failuresPermanentStoredOthersPropagated(String env) throws Exception {
    try (TestDb d = TestDb.open(env); Connection c = d.connect()) {
      d.createLedger();
      Request req = new Request("refund", "P-1");
      Result r = Idem.run(c, req, cx -> {
        ledger(cx, "P-1");
        throw new PermanentException("declined", "{\"code\": \"DECLINED\"}");
      });
      assertEquals(Outcome.FAILED, r.outcome());
      assertEquals("{\"code\": \"DECLINED\"}", r.error());
      assertEquals(Outcome.CACHED_FAILURE, Idem.run(c, req, cx -> "1").outcome());
      assertEquals(0, d.count("SELECT COUNT(*) FROM ledger"));
      // Any other exception rolls back, comes back as is, and leaves the key free.
      Request free = new Request("refund", "P-2");
      IllegalStateException boom = new IllegalStateException("gateway timeout");
      IllegalStateException got = assertThrows(IllegalStateException.class, () -> Idem.run(c, free,
          cx -> {
            ledger(cx, "P-2");
            throw boom;
          }));
      assertTrue(got == boom);
      assertTrue(c.getAutoCommit());
      // A result that is not JSON is refused: rolled back, the key stays free.
      IdemException bad = assertThrows(IdemException.class, () -> Idem.run(c, free, cx -> {
        ledger(cx, "P-2");
        return "{not json";
      }));
      assertEquals(IdemException.Kind.INVALID_REQUEST, bad.kind());
      assertEquals(0, d.count("SELECT COUNT(*) FROM ledger"));
      assertEquals(Outcome.EXECUTED, Idem.run(c, free, cx -> "2").outcome());
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void transientFaultsRerunThenUnavailable(String env) throws Exception {
    try (TestDb d = TestDb.open(env); Connection c = d.connect()) {
      d.createLedger();
      AtomicInteger runs = new AtomicInteger();
      Options three = Options.DEFAULTS.withRetry(
          new Retry(3, Duration.ofMillis(1), Duration.ofMillis(5)));
      IdemException e = assertThrows(IdemException.class, () -> Idem.run(c,
          new Request("refund", "T-1"), three, cx -> {
            runs.incrementAndGet();
            ledger(cx, "T-1");
            d.raiseSerializationFailure(cx);
            return "1";
          }));
      assertEquals(IdemException.Kind.UNAVAILABLE, e.kind());
      assertTrue(e.getCause() instanceof SQLException, String.valueOf(e.getCause()));
      assertEquals("40001", ((SQLException) e.getCause()).getSQLState());
      assertEquals(3, runs.get());
      assertEquals(0, d.count("SELECT COUNT(*) FROM ledger"));
      // A connection killed under the body: through a DataSource, the next attempt
      // takes another connection and commits once.
      AtomicInteger killed = new AtomicInteger();
      Result r = Idem.run(d.pool(), new Request("refund", "T-2"), Options.DEFAULTS, cx -> {
        ledger(cx, "T-2");
        if (killed.getAndIncrement() == 0) {
          d.kill(d.connectionId(cx));
        }
        return "{\"ok\":true}";
      });
      assertEquals(Outcome.EXECUTED, r.outcome());
      assertEquals(2, r.attempts());
      assertEquals(1, d.count("SELECT COUNT(*) FROM ledger WHERE refund_key = 'T-2'"));
      // On the single connection, the killed connection is UNAVAILABLE at once.
      try (Connection lone = d.connect()) {
        IdemException gone = assertThrows(IdemException.class, () -> Idem.run(lone,
            new Request("refund", "T-3"), cx -> {
              ledger(cx, "T-3");
              d.kill(d.connectionId(cx));
              return "1";
            }));
        assertEquals(IdemException.Kind.UNAVAILABLE, gone.kind());
      }
      assertEquals(0, d.count("SELECT COUNT(*) FROM ledger WHERE refund_key = 'T-3'"));
    }
  }

  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void retentionTenantAndInProgress(String env) throws Exception {
    try (TestDb d = TestDb.open(env); Connection c = d.connect()) {
      Instant before = Instant.now();
      Result kept = Idem.run(c, new Request("refund", "O-1"),
          Options.DEFAULTS.withRetention(Duration.ofMillis(1500)), cx -> "1");
      assertNotNull(kept.expiresAt());
      long s = Duration.between(before, kept.expiresAt()).toSeconds();
      assertTrue(s >= 1 && s <= 3, "expires in " + s + " s (1.5 s rounds up to 2)");
      // The same key in another tenant is another record.
      Result other = Idem.run(c, new Request("refund", "O-1"),
          Options.DEFAULTS.withTenant("t2"), cx -> "2");
      assertEquals(Outcome.EXECUTED, other.outcome());
      assertEquals(2, d.count("SELECT COUNT(*) FROM idem_records"));
      // A claim committed without its result holds a 30 s lease: in progress.
      try (Connection holder = d.connect()) {
        holder.setAutoCommit(false);
        SqlApi.Row row = new SqlApi(d.dialect).claim(holder, new Request("refund", "O-2"),
            "default", null);
        assertEquals("acquired", row.outcome());
        holder.commit();
        Result r = Idem.run(c, new Request("refund", "O-2"), cx -> "1");
        assertEquals(Outcome.IN_PROGRESS, r.outcome());
        assertEquals(row.token(), r.token());
        assertNotNull(r.leaseUntil());
      }
    }
  }

  /** One key, two ways in: Idem.run and idem serve on the same database see one record. */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {TestDb.POSTGRES, TestDb.MYSQL})
  void idemRunAndIdemServeShareOneRecordPerKey(String env) throws Exception {
    try (TestDb d = TestDb.open(env); Serve s = new Serve(d.store); Connection c = d.connect()) {
      Client http = s.client();
      Options t1 = Options.DEFAULTS.withTenant("t1");
      String stored = "{\"refund_id\": \"F-1\", \"amount\": 12.50}";
      assertEquals(Outcome.EXECUTED,
          Idem.run(c, new Request("refund", "S-1", "fp-1"), t1, cx -> stored).outcome());
      Claim again = http.claim(new ClaimRequest("refund", "S-1", "fp-1"));
      assertEquals(Outcome.REPLAYED, again.outcome());
      assertEquals(stored, again.result());
      Claim h = http.claim(new ClaimRequest("refund", "H-1", "fp-h"));
      http.complete("refund", "H-1", h.token(), "{\"refund_id\":\"F-2\"}");
      Result r = Idem.run(c, new Request("refund", "H-1", "fp-h"), t1, cx -> "{}");
      assertEquals(Outcome.REPLAYED, r.outcome());
      assertEquals("{\"refund_id\":\"F-2\"}", r.result());
    }
  }
}
