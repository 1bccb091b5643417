package test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

// refund is the handler of the tests: one ledger row, and its id as the result.
func refund(d *testDB, key string, runs *int32) idem.Handler {
	return func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
		n := atomic.AddInt32(runs, 1)
		id := fmt.Sprintf("F-%s-%d", key, n)
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(
			"INSERT INTO ledger (refund_key, refund_id, amount) VALUES (%s, %s, 100)", d.ph(1), d.ph(2)),
			key, id); err != nil {
			return nil, err
		}
		return json.RawMessage(fmt.Sprintf(`{"refund_id": "%s"}`, id)), nil
	}
}

func ledgerRows(t *testing.T, d *testDB, key string) int {
	return d.count(t, "SELECT COUNT(*) FROM ledger WHERE refund_key = "+d.ph(1), key)
}

// expectEffects checks how often the handler ran, the key's ledger rows, and that
// no record is left PROCESSING.
func expectEffects(t *testing.T, d *testDB, key string, runs int32, wantRuns int32, wantRows int) {
	t.Helper()
	if rows, processing := ledgerRows(t, d, key), d.processing(t); runs != wantRuns ||
		rows != wantRows || processing != 0 {
		t.Fatalf("runs %d, ledger rows %d, processing %d; want %d, %d, 0", runs, rows, processing,
			wantRuns, wantRows)
	}
}

func TestDoRunsOnceAndReplaysTheResultByteForByte(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		ctx := context.Background()
		var runs int32
		req := idem.Request{BizType: "refund", Key: "R-1", Fingerprint: "fp-1"}
		first, err := idem.Do(ctx, d.db, req, refund(d, "R-1", &runs))
		if err != nil || first.Outcome != idem.Executed {
			t.Fatalf("first Do = %+v, %v; want executed", first, err)
		}
		if string(first.Result) != `{"refund_id": "F-R-1-1"}` || first.Token < 1 {
			t.Fatalf("first result %s token %d", first.Result, first.Token)
		}
		second, err := idem.Do(ctx, d.db, req, refund(d, "R-1", &runs))
		if err != nil || second.Outcome != idem.Replayed {
			t.Fatalf("second Do = %+v, %v; want replayed", second, err)
		}
		if string(second.Result) != string(first.Result) {
			t.Fatalf("replayed %s, first %s", second.Result, first.Result)
		}
		expectEffects(t, d, "R-1", runs, 1, 1)
	})
}

func TestDoRefusesAnotherPayloadOrBizTypeForTheKey(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		ctx := context.Background()
		var runs int32
		if _, err := idem.Do(ctx, d.db, idem.Request{BizType: "refund", Key: "R-2", Fingerprint: "a"},
			refund(d, "R-2", &runs)); err != nil {
			t.Fatal(err)
		}
		res, err := idem.Do(ctx, d.db, idem.Request{BizType: "refund", Key: "R-2", Fingerprint: "b"},
			refund(d, "R-2", &runs))
		if !errors.Is(err, idem.ErrFingerprintMismatch) || res.Outcome != idem.FingerprintMismatch {
			t.Fatalf("other fingerprint: %+v, %v", res, err)
		}
		res, err = idem.Do(ctx, d.db, idem.Request{BizType: "payout", Key: "R-2", Fingerprint: "a"},
			refund(d, "R-2", &runs))
		if !errors.Is(err, idem.ErrKeyReused) || res.Outcome != idem.KeyReused {
			t.Fatalf("other biz_type: %+v, %v", res, err)
		}
		if runs != 1 {
			t.Fatalf("handler ran %d times, want 1", runs)
		}
	})
}

func TestDoCachesAPermanentFailureWithoutItsBusinessRows(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		ctx := context.Background()
		var runs int32
		declined := errors.New("card declined")
		failing := func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
			if _, err := refund(d, "R-3", &runs)(ctx, tx); err != nil {
				return nil, err
			}
			return nil, idem.Permanent(declined) // after its ledger row: that row must go
		}
		req := idem.Request{BizType: "refund", Key: "R-3"}
		res, err := idem.Do(ctx, d.db, req, failing)
		if !errors.Is(err, declined) || res.Outcome != idem.Failed ||
			string(res.Error) != `{"error":"card declined"}` {
			t.Fatalf("first Do = %+v (error %s), %v; want failed with the handler's error", res,
				res.Error, err)
		}
		again, err := idem.Do(ctx, d.db, req, failing)
		if err != nil || again.Outcome != idem.CachedFailure ||
			string(again.Error) != `{"error":"card declined"}` {
			t.Fatalf("second Do = %+v (error %s), %v; want cached_failure", again, again.Error, err)
		}
		expectEffects(t, d, "R-3", runs, 1, 0)
	})
}

func TestDoLeavesTheKeyFreeAfterAnOrdinaryError(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		ctx := context.Background()
		var runs int32
		busy := errors.New("provider busy")
		req := idem.Request{BizType: "refund", Key: "R-4"}
		res, err := idem.Do(ctx, d.db, req, func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
			if _, err := refund(d, "R-4", &runs)(ctx, tx); err != nil {
				return nil, err
			}
			return nil, busy
		})
		if !errors.Is(err, busy) || res.Outcome != "" || res.Attempts != 1 {
			t.Fatalf("Do = %+v, %v; want the handler's error after 1 attempt", res, err)
		}
		if n := d.count(t, "SELECT COUNT(*) FROM idem_records"); n != 0 || ledgerRows(t, d, "R-4") != 0 {
			t.Fatalf("records %d, ledger rows %d after a rollback; want 0, 0", n, ledgerRows(t, d, "R-4"))
		}
		res, err = idem.Do(ctx, d.db, req, refund(d, "R-4", &runs))
		if err != nil || res.Outcome != idem.Executed || string(res.Result) != `{"refund_id": "F-R-4-2"}` {
			t.Fatalf("retry Do = %+v, %v; want executed", res, err)
		}
	})
}

// A connection killed under the handler (pg_terminate_backend, KILL CONNECTION) is
// a transient fault: Do starts over on a new connection, and the effect is there once.
func TestDoStartsOverWhenItsConnectionIsKilled(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		ctx := context.Background()
		var runs int32
		req := idem.Request{BizType: "refund", Key: "R-5"}
		res, err := idem.Do(ctx, d.db, req, func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
			out, err := refund(d, "R-5", &runs)(ctx, tx)
			if err != nil || atomic.LoadInt32(&runs) > 1 {
				return out, err
			}
			id, err := d.connectionID(ctx, tx)
			if err != nil {
				return nil, err
			}
			if err := d.kill(id); err != nil {
				return nil, err
			}
			return out, nil // the complete and commit meet the dead connection
		}, idem.WithRetry(idem.Retry{MaxAttempts: 5, BaseDelay: time.Millisecond,
			MaxDelay: 10 * time.Millisecond}))
		if err != nil || res.Outcome != idem.Executed || res.Attempts != 2 {
			t.Fatalf("Do = %+v, %v; want executed on the 2nd attempt", res, err)
		}
		if string(res.Result) != `{"refund_id": "F-R-5-2"}` {
			t.Fatalf("result %s", res.Result)
		}
		expectEffects(t, d, "R-5", runs, 2, 1)
	})
}

// Faults that never pass use up the attempts and answer ErrUnavailable, the
// driver's error still reachable.
func TestDoGivesUpAfterItsAttempts(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		var runs int32
		res, err := idem.Do(context.Background(), d.db, idem.Request{BizType: "refund", Key: "R-6"},
			func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
				atomic.AddInt32(&runs, 1)
				id, err := d.connectionID(ctx, tx)
				if err == nil {
					err = d.kill(id)
				}
				if err != nil {
					return nil, err
				}
				return json.RawMessage(`1`), nil
			}, idem.WithRetry(idem.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond}))
		if !errors.Is(err, idem.ErrUnavailable) || res.Attempts != 3 || runs != 3 {
			t.Fatalf("Do = %+v, %v after %d runs; want ErrUnavailable after 3 attempts", res, err, runs)
		}
		if n := d.count(t, "SELECT COUNT(*) FROM idem_records"); n != 0 {
			t.Fatalf("%d records left; want none", n)
		}
	})
}

// holdLease claims key in lease mode (committed, 60 s), as another worker would.
func (d *testDB) holdLease(t *testing.T, bizType, key string) {
	t.Helper()
	if d.dialect == idem.Postgres {
		d.exec(t, "SELECT * FROM idem.lease_claim_v1($1, $2, NULL, lease => '60 seconds')", bizType, key)
		return
	}
	d.exec(t, "CALL idem_sql_lease_claim_v1(?, ?, NULL, 'default', NULL, 60)", bizType, key)
}

func TestDoAnswersInProgressAsAValueWhileAnotherHoldsTheKey(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		d.holdLease(t, "refund", "R-7")
		var runs int32
		res, err := idem.Do(context.Background(), d.db, idem.Request{BizType: "refund", Key: "R-7"},
			refund(d, "R-7", &runs))
		if err != nil || res.Outcome != idem.InProgress || res.LeaseUntil == nil ||
			time.Until(*res.LeaseUntil) < 50*time.Second || res.Token < 1 {
			t.Fatalf("Do = %+v, %v; want in_progress with the holder's lease", res, err)
		}
		if runs != 0 || ledgerRows(t, d, "R-7") != 0 {
			t.Fatalf("the handler ran %d times", runs)
		}
	})
}

// A value the store refuses (MySQL/MariaDB keep fingerprints of up to 255 bytes)
// is ErrInvalidRequest with the store's words, and nothing is run or kept.
// (PostgreSQL keeps up to 1024, as Do checks before.)
func TestDoReportsTheStoresRefusalAsInvalidRequest(t *testing.T) {
	func(t *testing.T, d *testDB) {
		d.createLedger(t)
		var runs int32
		res, err := idem.Do(context.Background(), d.db, idem.Request{BizType: "refund", Key: "R-8",
			Fingerprint: strings.Repeat("f", 300)}, refund(d, "R-8", &runs))
		if !errors.Is(err, idem.ErrInvalidRequest) || !strings.Contains(err.Error(), "fingerprint is 300 bytes") ||
			res.Attempts != 1 || runs != 0 {
			t.Fatalf("Do = %+v, %v", res, err)
		}
		if n := d.count(t, "SELECT COUNT(*) FROM idem_records"); n != 0 {
			t.Fatalf("%d records", n)
		}
	}(t, openTestDB(t, "IDEM_TEST_MYSQL_URL"))
}
