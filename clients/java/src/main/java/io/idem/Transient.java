package io.idem;

import java.io.IOException;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTimeoutException;
import java.sql.SQLTransientConnectionException;
import java.util.Set;

/** Which store faults pass on their own, after which the failed attempt committed nothing. */
public final class Transient {
  private Transient() {}

  /** MySQL/MariaDB error numbers: deadlock, lock wait timeout, connection killed
   *  (MariaDB), server shutdown, server gone or lost, query interrupted, too many
   *  connections. */
  private static final Set<Integer> MYSQL_ERRORS =
      Set.of(1213, 1205, 1927, 1053, 2006, 2013, 1317, 1040);

  /** Transient SQLSTATEs: serialization failure, deadlock, connection exceptions
   *  (class 08), operator intervention (class 57: pg_terminate_backend, shutdown)
   *  but a cancelled statement (57014: a statement timeout). */
  public static boolean isTransientSqlState(String state) {
    return state != null && (state.equals("40001") || state.equals("40P01")
        || state.startsWith("08") || (state.startsWith("57") && !state.equals("57014")));
  }

  /**
   * Whether t (or an exception in its cause chain) is a transient fault of the store:
   * a serialization failure (SQLSTATE 40001), a deadlock (40P01, MySQL 1213), a lock
   * wait timeout (1205), a killed, reset or refused connection.
   */
  public static boolean isTransient(Throwable t) {
    for (Throwable e = t; e != null; e = e.getCause() == e ? null : e.getCause()) {
      if (e instanceof PermanentException) {
        return false;
      }
      if (e instanceof SQLException s) {
        if (s instanceof SQLTimeoutException) {
          return false;
        }
        String state = s.getSQLState();
        if (isTransientSqlState(state) || MYSQL_ERRORS.contains(s.getErrorCode())
            || s instanceof SQLTransientConnectionException
            || s instanceof SQLRecoverableException) {
          return true;
        }
        SQLException next = s.getNextException();
        if (next != null && next != s && isTransient(next)) {
          return true;
        }
      }
      if (e instanceof IOException) {
        return true;
      }
    }
    return false;
  }
}
