package io.idem;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.io.PrintWriter;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.sql.Statement;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * A fresh database of the test on the server of IDEM_TEST_POSTGRES_URL or
 * IDEM_TEST_MYSQL_URL, with idem's SQL API installed by the built `idem migrate`;
 * dropped by close(). A test whose variable is unset is skipped, saying so.
 */
final class TestDb implements AutoCloseable {
  static final String POSTGRES = "IDEM_TEST_POSTGRES_URL";
  static final String MYSQL = "IDEM_TEST_MYSQL_URL";

  final String name;       // "postgres" or "mariadb"
  final Dialect dialect;
  final String store;      // the database as an idem store URL
  final String jdbcUrl;
  private final String rootJdbcUrl;
  final String user;
  final String password;
  private final String database;

  /** The URL of env, or the test is skipped (aborted) with a message saying why. */
  static String urlOf(String env) {
    String base = System.getenv(env);
    assumeTrue(base != null && !base.isEmpty(), env + " is not set: start the databases with "
        + "scripts/services.sh start DIR and source DIR/env.sh");
    return base;
  }

  static String idemBin() {
    String bin = System.getenv("IDEM_BIN");
    if (bin == null || bin.isEmpty()) {
      throw new IllegalStateException("IDEM_BIN is not set: it names the idem binary (ctest sets it)");
    }
    return bin;
  }

  static TestDb open(String env) throws Exception {
    return new TestDb(urlOf(env));
  }

  private TestDb(String base) throws Exception {
    URI u = URI.create(base);
    String[] userInfo = u.getUserInfo() == null ? new String[] {"", ""}
        : u.getUserInfo().split(":", 2);
    user = userInfo[0];
    password = userInfo.length > 1 ? userInfo[1] : "";
    String host = u.getHost() + (u.getPort() > 0 ? ":" + u.getPort() : "");
    database = "idem_java_" + ProcessHandle.current().pid() + "_"
        + Long.toUnsignedString(System.nanoTime() % 1_000_000_000L);
    String rootDb = u.getPath().replaceFirst("^/", "");
    if (base.startsWith("postgres")) {
      name = "postgres";
      dialect = Dialect.POSTGRES;
      rootJdbcUrl = "jdbc:postgresql://" + host + "/" + rootDb;
      jdbcUrl = "jdbc:postgresql://" + host + "/" + database;
    } else {
      name = "mariadb";
      dialect = Dialect.MYSQL;
      rootJdbcUrl = "jdbc:mariadb://" + host + "/" + rootDb;
      jdbcUrl = "jdbc:mariadb://" + host + "/" + database;
    }
    store = base.substring(0, base.length() - u.getRawPath().length()) + "/" + database
        + (u.getRawQuery() == null ? "" : "?" + u.getRawQuery());
    try (Connection c = DriverManager.getConnection(rootJdbcUrl, user, password);
         Statement s = c.createStatement()) {
      s.execute("CREATE DATABASE " + database);
      if (dialect == Dialect.POSTGRES) {
        // The test role is named idem: "$user" in the default search_path would become
        // the SQL API's schema idem once it exists; pin the store to public.
        s.execute("ALTER DATABASE " + database + " SET search_path = public");
      }
    }
    Process p = new ProcessBuilder(idemBin(), "migrate", "--store", store)
        .redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (p.waitFor() != 0) {
      close();
      throw new IllegalStateException("idem migrate --store " + store + ": " + out);
    }
  }

  Connection connect() throws SQLException {
    return DriverManager.getConnection(jdbcUrl, user, password);
  }

  /** A DataSource handing out new connections of the database. */
  DataSource pool() {
    return new DataSource() {
      public Connection getConnection() throws SQLException { return connect(); }

      public Connection getConnection(String u, String p) throws SQLException {
        return DriverManager.getConnection(jdbcUrl, u, p);
      }

      public PrintWriter getLogWriter() { return null; }

      public void setLogWriter(PrintWriter out) {}

      public void setLoginTimeout(int seconds) {}

      public int getLoginTimeout() { return 0; }

      public Logger getParentLogger() throws SQLFeatureNotSupportedException {
        throw new SQLFeatureNotSupportedException();
      }

      public <T> T unwrap(Class<T> iface) throws SQLException {
        throw new SQLException("not a wrapper");
      }

      public boolean isWrapperFor(Class<?> iface) { return false; }
    };
  }

  /** The n-th placeholder (JDBC: always ?). */
  void exec(String sql, Object... args) throws SQLException {
    try (Connection c = connect(); PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) {
        ps.setObject(i + 1, args[i]);
      }
      ps.execute();
    }
  }

  long count(String sql, Object... args) throws SQLException {
    try (Connection c = connect(); PreparedStatement ps = c.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) {
        ps.setObject(i + 1, args[i]);
      }
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getLong(1);
      }
    }
  }

  void createLedger() throws SQLException {
    exec("CREATE TABLE ledger (refund_key VARCHAR(255) NOT NULL, refund_id VARCHAR(255) NOT NULL, "
        + "amount BIGINT NOT NULL)");
  }

  /** The server's id of c's connection. */
  long connectionId(Connection c) throws SQLException {
    try (Statement s = c.createStatement();
         ResultSet rs = s.executeQuery(dialect == Dialect.POSTGRES
             ? "SELECT pg_backend_pid()" : "SELECT CONNECTION_ID()")) {
      rs.next();
      return rs.getLong(1);
    }
  }

  /** Ends the connection id from a second connection, as an operator would. */
  void kill(long id) throws SQLException {
    if (dialect == Dialect.POSTGRES) {
      exec("SELECT pg_terminate_backend(?)", (int) id);
    } else {
      exec("KILL CONNECTION " + id);
    }
  }

  /** Makes the database raise a serialization failure (SQLSTATE 40001) on c. */
  void raiseSerializationFailure(Connection c) throws SQLException {
    try (Statement s = c.createStatement()) {
      s.execute(dialect == Dialect.POSTGRES
          ? "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$"
          : "SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'injected'");
    }
  }

  /** Runs `idem purge --store` of this database. */
  void purge() throws IOException, InterruptedException {
    Process p = new ProcessBuilder(idemBin(), "purge", "--store", store)
        .redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, p.waitFor(), "idem purge: " + out);
  }

  long processing() throws SQLException {
    return count("SELECT COUNT(*) FROM idem_records WHERE state = 0");
  }

  // On PostgreSQL, WITH (FORCE) also ends the sessions the tests killed that are still
  // closing, but PostgreSQL 15 refuses it (42501, "must be a member of the role whose
  // process is being terminated") while an autovacuum worker is in the database: a plain
  // DROP stops that worker itself and waits up to 5 s for the other sessions. Tried in turn.
  @Override
  public void close() throws SQLException {
    try (Connection c = DriverManager.getConnection(rootJdbcUrl, user, password);
         Statement s = c.createStatement()) {
      if (dialect != Dialect.POSTGRES) {
        s.execute("DROP DATABASE " + database);
        return;
      }
      for (int attempt = 1; ; attempt++) {
        try {
          s.execute("DROP DATABASE " + database + " WITH (FORCE)");
          return;
        } catch (SQLException forced) {
          if (!"42501".equals(forced.getSQLState())) throw forced;
          try {
            s.execute("DROP DATABASE " + database);
            return;
          } catch (SQLException plain) {
            if (attempt >= 5) throw plain;
          }
        }
      }
    }
  }
}
