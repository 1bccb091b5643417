package io.idem;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

/** The SQL API (docs/sql.md) of one dialect, called on the caller's connection. */
final class SqlApi {
  private final Dialect d;

  SqlApi(Dialect d) { this.d = d; }

  /** The SQLSTATEs the SQL API raises, and the kinds they are. */
  private static final Map<String, IdemException.Kind> API_STATES = Map.of(
      "22023", IdemException.Kind.INVALID_REQUEST,
      "IDM01", IdemException.Kind.NOT_FOUND,
      "IDM02", IdemException.Kind.KEY_REUSED,
      "IDM03", IdemException.Kind.LEASE_LOST,
      "IDM04", IdemException.Kind.CONFLICT);

  /** The dialect of the connection's database, or an error naming the product. */
  static Dialect detect(Connection c) throws SQLException {
    String product = c.getMetaData().getDatabaseProductName();
    Dialect d = Dialect.ofProductName(product);
    if (d == Dialect.AUTO) {
      throw new IdemException(IdemException.Kind.INVALID_REQUEST,
          "idem: cannot tell the SQL dialect of the database '" + product
          + "'; pass Options.withDialect(Dialect.POSTGRES) or Dialect.MYSQL");
    }
    return d;
  }

  Row claim(Connection c, Request r, String tenant, Long retentionSeconds) throws SQLException {
    if (d == Dialect.POSTGRES) {
      return call(c, "claim_v1", "?, ?, ?, ?, ?::interval", ps -> {
        bindText(ps, r, tenant);
        if (retentionSeconds == null) {
          ps.setNull(5, Types.VARCHAR);
        } else {
          ps.setString(5, retentionSeconds + " seconds");
        }
      });
    }
    return call(c, "claim_v1", "?, ?, ?, ?, ?", ps -> {
      bindText(ps, r, tenant);
      if (retentionSeconds == null) {
        ps.setNull(5, Types.BIGINT);
      } else {
        ps.setLong(5, retentionSeconds);
      }
    });
  }

  private static void bindText(PreparedStatement ps, Request r, String tenant) throws SQLException {
    ps.setString(1, r.bizType());
    ps.setString(2, r.key());
    if (r.fingerprint() == null || r.fingerprint().isEmpty()) {
      ps.setNull(3, Types.VARCHAR);
    } else {
      ps.setString(3, r.fingerprint());
    }
    ps.setString(4, tenant);
  }

  void complete(Connection c, Request r, String tenant, String result) throws SQLException {
    Row row = call(c, "complete_v1", "?, ?, ?, ?", ps -> {
      ps.setString(1, r.bizType());
      ps.setString(2, r.key());
      ps.setString(3, result);
      ps.setString(4, tenant);
    });
    finishCheck("complete_v1", row.outcome());
  }

  void fail(Connection c, Request r, String tenant, boolean retryable, String error)
      throws SQLException {
    Row row = call(c, "fail_v1", "?, ?, ?, ?, ?", ps -> {
      ps.setString(1, r.bizType());
      ps.setString(2, r.key());
      ps.setBoolean(3, retryable);
      ps.setString(4, error);
      ps.setString(5, tenant);
    });
    finishCheck("fail_v1", row.outcome());
  }

  /** A complete or fail whose row reports a refusing outcome is that outcome's error. */
  private static void finishCheck(String name, String outcome) {
    IdemException.Kind k = IdemException.Kind.ofSlug(outcome);
    if (k != IdemException.Kind.OTHER) {
      throw new IdemException(k, "idem: " + name + " answered " + outcome);
    }
  }

  /** One row of the API. */
  record Row(String outcome, String result, String error, long token, Instant expiresAt,
             Instant leaseUntil, boolean takeover) {
    Result toResult(Outcome o) {
      return new Result(o, result, error, token, expiresAt, leaseUntil, takeover, 0);
    }
  }

  interface Binder {
    void bind(PreparedStatement ps) throws SQLException;
  }

  private Row call(Connection c, String name, String params, Binder binder) throws SQLException {
    String q = d == Dialect.POSTGRES
        ? "SELECT * FROM idem." + name + "(" + params + ")"
        : "CALL idem_sql_" + name + "(" + params + ")";
    try (PreparedStatement ps = c.prepareStatement(q)) {
      binder.bind(ps);
      boolean hasRows = ps.execute();
      Row row = null;
      // A CALL answers its rows and then a status: read every result so the
      // connection is free for the next statement.
      while (true) {
        if (hasRows) {
          try (ResultSet rs = ps.getResultSet()) {
            if (row == null && rs.next()) {
              row = read(rs, name);
            }
            while (rs.next()) {
              // drained
            }
          }
        } else if (ps.getUpdateCount() == -1) {
          break;
        }
        hasRows = ps.getMoreResults();
      }
      if (row == null) {
        throw new SQLException("idem: " + name + " returned no row");
      }
      return row;
    } catch (SQLException e) {
      throw apiError(e);
    }
  }

  /** An error the SQL API raised on purpose becomes an IdemException of its kind. */
  private static SQLException apiError(SQLException e) {
    IdemException.Kind k = API_STATES.get(e.getSQLState());
    if (k == null && e.getErrorCode() == 1644) { // MySQL SIGNAL without its state
      String m = String.valueOf(e.getMessage());
      k = m.contains("idem: not_found:") ? IdemException.Kind.NOT_FOUND
          : m.contains("idem: key_reused:") ? IdemException.Kind.KEY_REUSED
          : m.contains("idem: lease_lost:") ? IdemException.Kind.LEASE_LOST
          : m.contains("idem: already_finished:") ? IdemException.Kind.CONFLICT
          : m.contains("idem: the record of the key vanished") ? null
          : m.contains("idem: ") ? IdemException.Kind.INVALID_REQUEST : null;
    }
    if (k != null) {
      throw new IdemException(k, "idem: " + k.slug() + ": " + e.getMessage(), e);
    }
    return e;
  }

  private Row read(ResultSet rs, String name) throws SQLException {
    ResultSetMetaData md = rs.getMetaData();
    Map<String, Integer> at = new HashMap<>();
    for (int i = 1; i <= md.getColumnCount(); i++) {
      at.put(md.getColumnLabel(i).toLowerCase(Locale.ROOT), i);
    }
    Integer oc = at.get("outcome");
    String outcome = oc == null ? null : rs.getString(oc);
    if (outcome == null || outcome.isEmpty()) {
      throw new SQLException("idem: " + name + " returned no outcome");
    }
    String result = text(rs, at.get("result"));
    String error = text(rs, at.get("error"));
    String token = text(rs, at.get("token"));
    String takeover = text(rs, at.get("takeover"));
    boolean took = takeover != null
        && (takeover.equals("1") || takeover.equals("t") || takeover.equals("true"));
    return new Row(outcome, result, error, token == null ? 0 : Long.parseLong(token.trim()),
        time(rs, at.get("expires_at")), time(rs, at.get("lease_until")), took);
  }

  private static String text(ResultSet rs, Integer col) throws SQLException {
    return col == null ? null : rs.getString(col);
  }

  /** A timestamp column: timestamptz on PostgreSQL, DATETIME(6) in UTC on MySQL. */
  private Instant time(ResultSet rs, Integer col) throws SQLException {
    if (col == null) {
      return null;
    }
    if (d == Dialect.POSTGRES) {
      OffsetDateTime t = rs.getObject(col, OffsetDateTime.class);
      return t == null ? null : t.toInstant();
    }
    LocalDateTime t = rs.getObject(col, LocalDateTime.class);
    return t == null ? null : t.toInstant(ZoneOffset.UTC);
  }
}
