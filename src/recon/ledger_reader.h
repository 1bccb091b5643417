// The local ledger as a StatementReader: the rows of a SQL query on any
// SQL store URL, read through idem's Store/Transaction Query API in one read
// transaction that writes nothing:
//
//   --ledger sqlite://./shop.db
//   --ledger-query "SELECT order_no AS key, amount AS amount, currency AS currency,
//                          status AS status, created_at AS time FROM ledger"
//
// The query's columns are named after the fields (key, amount, currency, status,
// time; on MySQL/MariaDB quote `key`). Memory stays bounded whatever the ledger's
// size: SQLite runs the query once and streams its rows (Transaction::QueryPages,
// in the table's order; ReadAll); PostgreSQL reads through a cursor (FETCH in
// pages); MySQL, and Next() on SQLite, read in key order in pages (keyset pagination
// on the key compared as bytes, every row of a key in one page), which is fast when
// the key column has an index (the ledger's unique key usually is one).
//
// Amounts must be exact: an integer, text or exact decimal column (PostgreSQL
// NUMERIC and MySQL DECIMAL come back as text). A floating-point value (REAL, FLOAT,
// DOUBLE, and NUMERIC on SQLite, whose affinity stores a decimal as REAL) is refused
// as bad input; select it as text (CAST(amount AS TEXT)).
//
// Thread safety: used by one thread at a time; the Store must outlive the reader.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "idem/store.h"
#include "recon/fields.h"
#include "recon/row.h"

namespace idem::recon {

// Starts reading `query` on `store` (opened read-only by the caller). Errors:
// kInvalidArgument when the store runs no SQL; the query's own errors come from
// Next() as the store reports them (kInvalidArgument for bad SQL, kUnavailable for
// the store). `normalizer` must outlive the reader. `page_rows`: rows a page
// (tests make it small to cross many page boundaries).
absl::StatusOr<std::unique_ptr<StatementReader>> OpenLedger(Store& store, std::string query,
                                                            const Normalizer& normalizer,
                                                            int page_rows = 50000);

}  // namespace idem::recon
