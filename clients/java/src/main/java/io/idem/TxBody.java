package io.idem;

import java.sql.Connection;

/**
 * The work of one key, done on the connection inside the transaction that also holds
 * the claim. It returns its result as JSON text (null is stored as null), kept byte
 * for byte. It may run more than once when the store meets a transient fault (each
 * run in a new transaction, the earlier one rolled back), so every effect it has must
 * go through the connection; it must not commit, roll back or change autocommit.
 * A {@link PermanentException} is stored as the key's final answer; any other
 * exception rolls everything back and leaves the key free.
 */
@FunctionalInterface
public interface TxBody {
  String apply(Connection connection) throws Exception;
}
