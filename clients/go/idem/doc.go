// Package idem makes a Go service's side effects happen exactly once, through
// idem's SQL API in the service's own PostgreSQL or MySQL/MariaDB database, or
// through the HTTP API of `idem serve`.
//
//   - Do runs a handler in a database transaction together with the claim of its
//     key and the storing of its result: the business rows, the claim and the
//     result commit or roll back as one. A duplicate gets the stored result
//     without running the handler.
//   - Middleware gives any http.Handler Idempotency-Key semantics the way
//     `idem proxy` does: the first answer to a key is stored and replayed to every
//     retry with the header Idempotent-Replayed: true.
//   - Client calls `idem serve` (claims, complete, fail, records) and turns its
//     problem+json answers into a *ProblemError.
//
// The package uses only the standard library: bring any database/sql driver
// (github.com/lib/pq, github.com/jackc/pgx/v5/stdlib, github.com/go-sql-driver/mysql).
// The SQL API (idem.claim_v1 and friends, or the idem_sql_*_v1 procedures) is
// installed in the database by `idem migrate`.
package idem
