package io.idem;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.HexFormat;
import javax.sql.DataSource;

/**
 * Runs a body exactly once per key through idem's SQL API (docs/sql.md), in the
 * caller's own database transaction: the claim, the body's writes and its result
 * commit together or not at all.
 */
public final class Idem {
  private Idem() {}

  /** idem's version (the project's version in CMakeLists.txt). */
  public static final String VERSION = Version.VALUE;

  /** {@link #run(Connection, Request, Options, TxBody)} with {@link Options#DEFAULTS}. */
  public static Result run(Connection connection, Request request, TxBody body) throws Exception {
    return run(connection, request, Options.DEFAULTS, body);
  }

  /**
   * Runs body exactly once per key, however often the same request arrives:
   *
   * <ol>
   *   <li>begins a transaction on the connection (autocommit off; its setting is
   *       restored afterwards) and claims the request's key in it;
   *   <li>acquired: runs body in the same transaction, stores its result and commits,
   *       answering {@link Outcome#EXECUTED} with the result;
   *   <li>finished before: answers REPLAYED (the stored result, byte for byte) or
   *       CACHED_FAILURE (the stored error) without running body;
   *   <li>another holder's lease is live: IN_PROGRESS; the key belongs to another
   *       biz_type, another fingerprint, purged: KEY_REUSED, FINGERPRINT_MISMATCH,
   *       EXPIRED (outcomes, not exceptions).
   * </ol>
   *
   * <p>A {@link PermanentException} of body rolls its transaction back and a new one
   * claims the key and stores the failure: the answer is FAILED, every later call's
   * CACHED_FAILURE. Any other exception of body rolls back and is thrown as is: the
   * key stays free. Transient store faults (serialization failure, deadlock, lock wait
   * timeout, a killed connection; {@link Transient#isTransient}) roll back and run the
   * whole transaction again with the Retry's full-jitter backoff; then an
   * {@link IdemException} of kind UNAVAILABLE whose cause is the driver's last error.
   * On a single connection a killed connection cannot be retried: pass a DataSource
   * to {@link #run(DataSource, Request, Options, TxBody)} for that.
   *
   * <p>Every field is checked before any statement is sent (INVALID_REQUEST, naming
   * the field). The connection must have no open work of its own when autocommit
   * is off: the run commits or rolls back whatever the transaction holds.
   */
  public static Result run(Connection connection, Request request, Options options, TxBody body)
      throws Exception {
    if (connection == null || body == null) {
      throw new IllegalArgumentException("Idem.run needs a Connection and a body");
    }
    return new Runner(new Single(connection), request, options).run(body);
  }

  /**
   * {@link #run(Connection, Request, Options, TxBody)} taking a new connection from the
   * pool for every attempt (closed after it), so a connection killed under the body is
   * retried on another one.
   */
  public static Result run(DataSource pool, Request request, Options options, TxBody body)
      throws Exception {
    if (pool == null || body == null) {
      throw new IllegalArgumentException("Idem.run needs a DataSource and a body");
    }
    return new Runner(new Pooled(pool), request, options).run(body);
  }

  /** Marks e as the body's final failure (see {@link PermanentException}). */
  public static PermanentException permanent(Throwable e) {
    if (e instanceof PermanentException p) {
      return p;
    }
    return new PermanentException(String.valueOf(e.getMessage()), e);
  }

  /** Whether t or an exception in its cause chain is a {@link PermanentException}. */
  public static boolean isPermanent(Throwable t) {
    return permanentOf(t) != null;
  }

  static PermanentException permanentOf(Throwable t) {
    for (Throwable e = t; e != null; e = e.getCause() == e ? null : e.getCause()) {
      if (e instanceof PermanentException p) {
        return p;
      }
    }
    return null;
  }

  /** The lowercase hex SHA-256 of b (64 characters), the fingerprint idem's tools make. */
  public static String fingerprint(byte[] b) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(b));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("no SHA-256 in this JDK", e);
    }
  }

  /**
   * The {@link #fingerprint} of the canonical form of one JSON text ({@link
   * Json#canonical}: members sorted by name, no insignificant white space, numbers as
   * written): two encodings of the same value have the same fingerprint, the one every
   * idem client makes of it (clients/CASES.md).
   */
  public static String fingerprintJson(String json) {
    return fingerprint(Json.canonical(json).getBytes(StandardCharsets.UTF_8));
  }

  // ---------------------------------------------------------------------------

  /** Where an attempt's connection comes from. */
  private interface Source {
    Connection get() throws SQLException;

    void release(Connection c);

    /** A connection that cannot serve another attempt (the single one, closed). */
    boolean exhausted();
  }

  /** How long a connection's check after a transient fault may take. */
  private static final int VALID_TIMEOUT_S = 2;

  private static final class Single implements Source {
    final Connection c;

    Single(Connection c) { this.c = c; }

    public Connection get() { return c; }

    public void release(Connection c) {}

    public boolean exhausted() {
      try {
        return c.isClosed() || !c.isValid(VALID_TIMEOUT_S);
      } catch (SQLException e) {
        return true;
      }
    }
  }

  private static final class Pooled implements Source {
    final DataSource pool;

    Pooled(DataSource pool) { this.pool = pool; }

    public Connection get() throws SQLException { return pool.getConnection(); }

    public void release(Connection c) {
      try {
        c.close();
      } catch (SQLException ignored) {
        // a killed connection's close may fail; it is gone either way
      }
    }

    public boolean exhausted() { return false; }
  }

  /** The body's own failure, carried out of the retry loop unretried. */
  private static final class BodyFailure extends Exception {
    private static final long serialVersionUID = 1L;

    BodyFailure(Throwable cause) { super(cause); }
  }

  /** One attempt, in a transaction of one connection. */
  private interface Attempt {
    Result run(Connection c, SqlApi api) throws Exception;
  }

  private static final class Runner {
    final Source source;
    final Request req;
    final Options opt;
    Dialect dialect;

    Runner(Source source, Request req, Options opt) {
      if (req == null) {
        throw IdemException.invalid("request is null");
      }
      if (opt == null) {
        throw new IllegalArgumentException("Idem.run: options must not be null");
      }
      req.validate(Request.MAX_FINGERPRINT_BYTES);
      opt.validate();
      this.source = source;
      this.req = req;
      this.opt = opt;
      this.dialect = opt.dialect();
      if (dialect != Dialect.AUTO) {
        req.validate(dialect.maxFingerprintBytes());
      }
    }

    Result run(TxBody body) throws Exception {
      Result res;
      try {
        res = retried(0, (c, api) -> once(c, api, body));
      } catch (BodyFailure f) {
        Throwable cause = f.getCause();
        PermanentException p = permanentOf(cause);
        if (p == null) {
          if (cause instanceof Exception e) {
            throw e;
          }
          if (cause instanceof Error e) {
            throw e;
          }
          throw new IllegalStateException(cause);
        }
        return storeFailure(p, lastAttempts);
      }
      return res;
    }

    int lastAttempts;

    /** Runs attempt until it succeeds, fails for good or runs out of attempts. */
    Result retried(int before, Attempt attempt) throws Exception {
      Retry retry = opt.retry();
      for (int n = 1; ; n++) {
        lastAttempts = before + n;
        Connection c = null;
        try {
          c = source.get();
          if (dialect == Dialect.AUTO) {
            dialect = SqlApi.detect(c);
            req.validate(dialect.maxFingerprintBytes()); // before the first statement
          }
          return attempt.run(c, new SqlApi(dialect)).withAttempts(before + n);
        } catch (BodyFailure | IdemException e) {
          throw e;
        } catch (Exception e) {
          if (!Transient.isTransient(e)) {
            throw e;
          }
          if (n >= retry.attempts() || source.exhausted() || !retry.sleep(n)) {
            throw new IdemException(IdemException.Kind.UNAVAILABLE,
                "idem: unavailable: the store failed (" + (before + n) + " attempts): " + e, e);
          }
        } finally {
          if (c != null) {
            source.release(c);
          }
        }
      }
    }

    /** Begins the attempt's transaction; the caller's autocommit is restored after. */
    private Result inTransaction(Connection c, Attempt work, SqlApi api) throws Exception {
      boolean auto = c.getAutoCommit();
      if (auto) {
        c.setAutoCommit(false);
      }
      boolean done = false;
      try {
        Result r = work.run(c, api);
        done = true;
        return r;
      } finally {
        if (!done) {
          rollbackQuietly(c);
        }
        if (auto && !c.isClosed()) {
          try {
            c.setAutoCommit(true);
          } catch (SQLException e) {
            if (done) {
              throw e;
            }
          }
        }
      }
    }

    /** One attempt: claim, body, complete, commit. */
    private Result once(Connection conn, SqlApi api, TxBody body) throws Exception {
      return inTransaction(conn, (c, a) -> {
        SqlApi.Row claim = a.claim(c, req, opt.tenant(), opt.retentionSeconds());
        Outcome o = outcomeOf(claim);
        if (o != Outcome.ACQUIRED) {
          c.rollback();
          return claim.toResult(o);
        }
        String out;
        try {
          out = body.apply(c);
        } catch (Throwable e) {
          rollbackQuietly(c);
          if (Transient.isTransient(e) && permanentOf(e) == null) {
            throw e instanceof Exception x ? x : new BodyFailure(e); // a store fault: again
          }
          throw new BodyFailure(e);
        }
        if (out == null) {
          out = "null";
        }
        if (!Json.isValid(out)) {
          rollbackQuietly(c);
          throw new BodyFailure(IdemException.invalid("the body's result is not valid JSON"));
        }
        a.complete(c, req, opt.tenant(), out);
        c.commit();
        return new Result(Outcome.EXECUTED, out, null, claim.token(), claim.expiresAt(), null,
            claim.takeover(), 0);
      }, api);
    }

    /**
     * Stores the body's permanent failure, its work already rolled back: a new
     * transaction claims the key again and fails it for good. A duplicate that
     * finished the key in between wins; its answer is returned.
     */
    private Result storeFailure(PermanentException p, int before) throws Exception {
      String failure = p.failureJson();
      Result res;
      try {
        res = retried(before, (conn, api) -> inTransaction(conn, (c, a) -> {
          SqlApi.Row claim = a.claim(c, req, opt.tenant(), opt.retentionSeconds());
          Outcome o = outcomeOf(claim);
          if (o != Outcome.ACQUIRED) {
            c.rollback();
            return claim.toResult(o);
          }
          a.fail(c, req, opt.tenant(), false, failure);
          c.commit();
          return new Result(Outcome.FAILED, null, failure, claim.token(), claim.expiresAt(),
              null, false, 0);
        }, api));
      } catch (IdemException e) {
        throw new IdemException(e.kind(), "idem: the body failed permanently (" + p.getMessage()
            + ") and the failure could not be stored: " + e.getMessage(), p);
      }
      // Our own failure, committed by an attempt whose answer was lost.
      if (res.outcome() == Outcome.CACHED_FAILURE && failure.equals(res.error())) {
        return res.withOutcome(Outcome.FAILED);
      }
      return res;
    }
  }

  private static Outcome outcomeOf(SqlApi.Row row) throws SQLException {
    Outcome o = Outcome.ofWire(row.outcome());
    if (o == null || o == Outcome.EXECUTED || o == Outcome.FAILED) {
      throw new SQLException("idem: claim_v1 answered the unknown outcome '" + row.outcome() + "'");
    }
    return o;
  }

  private static void rollbackQuietly(Connection c) {
    try {
      if (!c.isClosed()) {
        c.rollback();
      }
    } catch (SQLException ignored) {
      // the connection is broken: the server rolls the transaction back
    }
  }
}
