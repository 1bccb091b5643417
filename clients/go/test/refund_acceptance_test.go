package test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

const (
	acceptanceRefunds    = 1000 // keys
	acceptanceDuplicates = 16   // concurrent deliveries of each key
	acceptanceKeysAtOnce = 4    // keys delivered at the same time
)

var errInjectedRollback = errors.New("injected rollback")

// The acceptance test of Do: a refund (a ledger row, the claim and the result in one
// transaction) delivered 16 times at once for each of 1,000 keys, with rollbacks
// injected into the handler and connections killed from a second connection under
// it. Every key ends with one ledger row and a SUCCEEDED record, every delivery is
// answered the result of the transaction that committed, nothing stays PROCESSING.
func TestRefundExactlyOnceUnderDuplicatesRollbacksAndKills(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		d.db.SetMaxOpenConns(2 * acceptanceKeysAtOnce * acceptanceDuplicates)
		d.db.SetMaxIdleConns(2 * acceptanceKeysAtOnce * acceptanceDuplicates)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		retry := idem.WithRetry(idem.Retry{MaxAttempts: 10, BaseDelay: 2 * time.Millisecond,
			MaxDelay: 100 * time.Millisecond})

		var runs, rollbacks, kills, executed int64
		answers := newAnswers() // per key, what each delivery got
		deliver := func(k, dup int, rng *rand.Rand) error {
			key := fmt.Sprintf("R-%04d", k)
			handler := func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
				n := atomic.AddInt64(&runs, 1)
				id := fmt.Sprintf("F-%s-%d", key, n)
				if _, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO ledger (refund_key, "+
					"refund_id, amount) VALUES (%s, %s, 100)", d.ph(1), d.ph(2)), key, id); err != nil {
					return nil, err
				}
				switch p := rng.Intn(100); {
				case p < 10:
					atomic.AddInt64(&rollbacks, 1)
					return nil, errInjectedRollback
				case p < 13:
					cid, err := d.connectionID(ctx, tx)
					if err == nil {
						err = d.kill(cid)
					}
					if err != nil {
						return nil, err
					}
					atomic.AddInt64(&kills, 1)
				}
				return json.RawMessage(fmt.Sprintf(`{"refund_id":"%s"}`, id)), nil
			}
			req := idem.Request{BizType: "refund", Key: key, Fingerprint: idem.Fingerprint([]byte(key))}
			for delivery := 1; delivery <= 500; delivery++ {
				res, err := idem.Do(ctx, d.db, req, handler, retry)
				switch {
				case errors.Is(err, errInjectedRollback), errors.Is(err, idem.ErrUnavailable):
					continue // redelivered, as a queue would
				case err != nil:
					return fmt.Errorf("%s delivery %d: %w", key, dup, err)
				case res.Outcome == idem.InProgress:
					time.Sleep(time.Duration(1+rng.Intn(5)) * time.Millisecond)
					continue
				case res.Outcome == idem.Executed || res.Outcome == idem.Replayed:
					if res.Outcome == idem.Executed {
						atomic.AddInt64(&executed, 1)
					}
					var body struct {
						RefundID string `json:"refund_id"`
					}
					if err := json.Unmarshal(res.Result, &body); err != nil {
						return fmt.Errorf("%s: result %s: %v", key, res.Result, err)
					}
					answers[k][dup] = body.RefundID
					return nil
				default:
					return fmt.Errorf("%s delivery %d: unexpected %+v", key, dup, res)
				}
			}
			return fmt.Errorf("%s delivery %d: no answer after 500 redeliveries", key, dup)
		}

		start := time.Now()
		deliverConcurrently(t, deliver)
		t.Logf("%s: %d handler runs, %d injected rollbacks, %d connections killed, %d executed "+
			"answers, %s", d.name, runs, rollbacks, kills, executed, time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			return
		}
		if rollbacks == 0 || kills == 0 {
			t.Fatalf("no faults injected (rollbacks %d, kills %d)", rollbacks, kills)
		}

		d.checkRefundedOnce(t, answers)
		if executed > acceptanceRefunds {
			t.Errorf("%d deliveries were answered executed; at most one per key", executed)
		}
	})
}

// newAnswers holds, per key and delivery, the refund id the delivery was answered.
func newAnswers() [][]string {
	answers := make([][]string, acceptanceRefunds)
	for k := range answers {
		answers[k] = make([]string, acceptanceDuplicates)
	}
	return answers
}

// deliverConcurrently delivers each of the acceptanceRefunds keys acceptanceDuplicates
// times at once, acceptanceKeysAtOnce keys at a time: deliver(k, dup, rng) is one
// delivery of key k, which must end with an answer (its error fails the test).
func deliverConcurrently(t *testing.T, deliver func(k, dup int, rng *rand.Rand) error) {
	t.Helper()
	keys := make(chan int)
	errs := make(chan error, acceptanceRefunds*acceptanceDuplicates)
	var wg sync.WaitGroup
	for w := 0; w < acceptanceKeysAtOnce; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			for k := range keys {
				var dups sync.WaitGroup
				for dup := 0; dup < acceptanceDuplicates; dup++ {
					dups.Add(1)
					go func(dup int) {
						defer dups.Done()
						rng := rand.New(rand.NewSource(seed*1e6 + int64(k*acceptanceDuplicates+dup)))
						if err := deliver(k, dup, rng); err != nil {
							errs <- err
						}
					}(dup)
				}
				dups.Wait()
			}
		}(int64(w))
	}
	for k := 0; k < acceptanceRefunds; k++ {
		keys <- k
	}
	close(keys)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// checkRefundedOnce checks the end of a refund run: one ledger row per key, every
// delivery answered that row's refund id (answers[k][dup]), every record SUCCEEDED
// and none left PROCESSING.
func (d *testDB) checkRefundedOnce(t *testing.T, answers [][]string) {
	t.Helper()
	ledger := map[string]string{}
	rows, err := d.admin.Query("SELECT refund_key, refund_id FROM ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, id string
		if err := rows.Scan(&key, &id); err != nil {
			t.Fatal(err)
		}
		if other, dup := ledger[key]; dup {
			t.Errorf("%s has two ledger rows: %s and %s", key, other, id)
		}
		ledger[key] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ledger) != acceptanceRefunds {
		t.Errorf("%d keys have a ledger row; want %d", len(ledger), acceptanceRefunds)
	}
	for k, got := range answers {
		key := fmt.Sprintf("R-%04d", k)
		for dup, id := range got {
			if id != ledger[key] {
				t.Errorf("%s delivery %d was answered %q; the ledger holds %q", key, dup, id, ledger[key])
			}
		}
	}
	if n := d.processing(t); n != 0 {
		t.Errorf("%d records left PROCESSING", n)
	}
	if n := d.count(t, "SELECT COUNT(*) FROM idem_records WHERE state = 1"); n != acceptanceRefunds {
		t.Errorf("%d records SUCCEEDED; want %d", n, acceptanceRefunds)
	}
}
