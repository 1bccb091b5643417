package test

// The Go example of docs/sql.md ("In Go with database/sql"), byte for byte from its
// import on: TestRefundSQLDocExampleIsTheTestedCode fails when the two differ, and
// TestRefundFromTheSQLDocExactlyOnce... runs it. Change both together.

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/lib/pq"              // registers "postgres"
)

// refundSQL is the SQL of one database: PostgreSQL's functions with lib/pq's $n
// placeholders, or MySQL/MariaDB's procedures, called with CALL and ? placeholders.
type refundSQL struct{ claim, ledger, complete string }

var (
	refundOnPostgres = refundSQL{
		claim:    `SELECT * FROM idem.claim_v1($1, $2, $3)`,
		ledger:   `INSERT INTO ledger (refund_key, refund_id, amount) VALUES ($1, $2, $3)`,
		complete: `SELECT * FROM idem.complete_v1($1, $2, $3)`,
	}
	refundOnMySQL = refundSQL{
		claim:    `CALL idem_sql_claim_v1(?, ?, ?, 'default', NULL)`,
		ledger:   `INSERT INTO ledger (refund_key, refund_id, amount) VALUES (?, ?, ?)`,
		complete: `CALL idem_sql_complete_v1(?, ?, ?, 'default')`,
	}
)

// ErrRefundInProgress: another open transaction (past the SQL API's 2 s lock wait)
// or a lease holder has the key. Nothing was written: deliver the refund again later.
var ErrRefundInProgress = errors.New("the refund is in progress elsewhere: try again later")

// Refund books the refund `key` of `amount` once, however often and however
// concurrently it is delivered: the ledger row, the claim of the key and the result
// commit in one transaction, or none of them does. It answers the refund's result,
// {"refund_id":"..."}: for every delivery, the one that committed, byte for byte.
func Refund(ctx context.Context, db *sql.DB, q refundSQL, key string, amount int64) (json.RawMessage, error) {
	const attempts = 8
	for attempt := 1; ; attempt++ {
		result, err := refundOnce(ctx, db, q, key, amount)
		if err == nil || !retryable(err) || attempt == attempts {
			return result, err
		}
		// Rolled back, or the connection died: run the whole transaction again after
		// a random delay under a bound that doubles (20 ms, 40 ms, ... 1.28 s).
		delay := time.Duration(rand.Int63n(int64(10 * time.Millisecond << attempt)))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// refundOnce is one attempt: claim, ledger row, complete, commit.
func refundOnce(ctx context.Context, db *sql.DB, q refundSQL, key string, amount int64) (json.RawMessage, error) {
	tx, err := db.BeginTx(ctx, nil) // the database's default isolation level
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() // undoes the claim and the ledger row unless Commit ran first

	// The same key with another amount is a different request: fingerprint_mismatch.
	fingerprint := fmt.Sprintf("amount=%d", amount)
	var outcome string
	var result []byte
	if err := scanAPIRow(tx.QueryRowContext(ctx, q.claim, "refund", key, fingerprint),
		&outcome, &result); err != nil {
		return nil, err
	}
	switch outcome {
	case "acquired": // the key is this transaction's until it ends
	case "replayed": // refunded before: the stored result, byte for byte
		return result, nil
	case "in_progress":
		return nil, ErrRefundInProgress
	default: // key_reused, fingerprint_mismatch, cached_failure, expired
		return nil, fmt.Errorf("refund %s: the claim answered %s", key, outcome)
	}

	id := make([]byte, 8)
	if _, err := crand.Read(id); err != nil {
		return nil, err
	}
	refundID := "F-" + hex.EncodeToString(id)
	if _, err := tx.ExecContext(ctx, q.ledger, key, refundID, amount); err != nil {
		return nil, err
	}
	if result, err = json.Marshal(map[string]string{"refund_id": refundID}); err != nil {
		return nil, err
	}
	// complete finishes the claim this transaction made (in this transaction only).
	if err := scanAPIRow(tx.QueryRowContext(ctx, q.complete, "refund", key, string(result)),
		&outcome, new([]byte)); err != nil {
		return nil, err
	}
	if outcome != "executed" {
		return nil, fmt.Errorf("refund %s: complete answered %s", key, outcome)
	}
	// A COMMIT whose answer is lost may have committed: the retry's claim then
	// answers replayed with this result.
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return result, nil
}

// scanAPIRow reads the one row a function or procedure of the SQL API answers
// (outcome, result, error, token, expires_at, lease_until, takeover), keeping the
// first two. A MySQL CALL answers every column, so every one is scanned.
func scanAPIRow(row *sql.Row, outcome *string, result *[]byte) error {
	var rest [5]any
	return row.Scan(outcome, result, &rest[0], &rest[1], &rest[2], &rest[3], &rest[4])
}

// retryable: the transaction was rolled back, or its connection lost, and running
// it again is safe. A serialization failure or deadlock, a lock wait timeout, a
// killed or broken connection.
func retryable(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		code := string(pqErr.Code)
		return code == "40001" || code == "40P01" || // serialization failure, deadlock
			strings.HasPrefix(code, "08") || // connection exception
			code == "57P01" || code == "57P02" || code == "57P03" // terminated, shutdown
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch myErr.Number {
		case 1213, 1205, 1927, 1053: // deadlock, lock wait timeout, connection killed, shutdown
			return true
		case 1644: // a SIGNAL: the SQL API's 40001 is a purge that raced with the claim
			return strings.HasPrefix(myErr.Message, "idem: the record of the key vanished")
		}
		return false
	}
	// A lost connection, as the drivers report it; lib/pq says "pq: unexpected
	// message ..." when the server ended the connection in the middle of an answer.
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) ||
		strings.HasPrefix(err.Error(), "pq: unexpected message")
}
