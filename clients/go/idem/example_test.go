package idem_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/idem-io/idem/clients/go/idem"
)

var errUnknownOrder = errors.New("unknown order")

// A refund that happens once per refund id, however often its message arrives: the
// ledger row, the claim and the result commit together.
func ExampleDo() {
	var db *sql.DB // sql.Open("postgres", ...) with lib/pq, or "mysql" with go-sql-driver/mysql
	ctx := context.Background()
	body := []byte(`{"order":"O-7","amount":1250}`)
	fingerprint, err := idem.FingerprintJSON(body)
	if err != nil {
		log.Fatal(err)
	}
	res, err := idem.Do(ctx, db, idem.Request{BizType: "refund", Key: "R-2024-0001",
		Fingerprint: fingerprint},
		func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
			var known bool
			if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM orders WHERE id = $1)",
				"O-7").Scan(&known); err != nil {
				return nil, err // a store fault is retried; any other error leaves the key free
			}
			if !known {
				return nil, idem.Permanent(errUnknownOrder) // stored: every retry gets it
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (order_id, amount) VALUES ($1, $2)",
				"O-7", 1250); err != nil {
				return nil, err
			}
			return json.RawMessage(`{"refund_id":"F-1"}`), nil
		})
	switch {
	case errors.Is(err, idem.ErrFingerprintMismatch):
		fmt.Println("the key was used for another refund")
	case err != nil:
		fmt.Println("not done, retry later:", err)
	case res.Outcome == idem.InProgress:
		fmt.Println("another worker holds the key")
	case res.Outcome == idem.CachedFailure:
		fmt.Println("failed before:", string(res.Error))
	default: // Executed or Replayed
		fmt.Println(res.Outcome, string(res.Result))
	}
}

// An HTTP API whose POSTs and PATCHes take an Idempotency-Key: the first answer is
// stored, retries get it again with Idempotent-Replayed: true.
func ExampleMiddleware() {
	var db *sql.DB
	mux := http.NewServeMux()
	mux.HandleFunc("/refunds", func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idem.TxFromContext(r.Context()) // commits with the stored answer
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO ledger (amount) VALUES (1250)"); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // 5xx: not stored
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"refund_id":"F-1"}`)
	})
	guarded := idem.Middleware(db, idem.MiddlewareOptions{BizType: "refund-api",
		ClientHeader: "Authorization"})(mux)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", guarded))
}

// Claim, effect, complete through `idem serve`.
func ExampleClient() {
	c, err := idem.NewClient("http://127.0.0.1:7070", "the tenant's token")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	claim, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "R-2024-0001",
		LeaseMS: 60000})
	var problem *idem.ProblemError
	switch {
	case errors.Is(err, idem.ErrInProgress) && errors.As(err, &problem):
		fmt.Println("held by another; retry after", problem.RetryAfter)
		return
	case err != nil:
		log.Fatal(err)
	case claim.Outcome == idem.Replayed:
		fmt.Println("done before:", string(claim.Result))
		return
	case claim.Outcome == idem.CachedFailure:
		fmt.Println("failed before:", string(claim.Error))
		return
	}
	// ... perform the refund with the payment provider ...
	if _, err := c.Complete(ctx, "refund", "R-2024-0001", claim.Token,
		json.RawMessage(`{"refund_id":"F-1"}`)); err != nil {
		log.Fatal(err)
	}
}
