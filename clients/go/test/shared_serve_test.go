package test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idem-io/idem/clients/go/idem"
)

// One key, two ways in: the SQL API inside the caller's transaction (idem.Do) and
// idem serve's HTTP API on the same database see one record, and each answers what
// the other stored.
func TestDoAndIdemServeShareOneRecordPerKey(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		s := startServeOn(t, d.store)
		c := s.client(t, s.token1)
		ctx := context.Background()
		ran := 0
		handler := func(result string) idem.Handler {
			return func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
				ran++
				return json.RawMessage(result), nil
			}
		}
		req := func(key, fp string) idem.Request {
			return idem.Request{BizType: "refund", Key: key, Fingerprint: fp, Tenant: "t1"}
		}

		// Stored through the SQL API, replayed by idem serve byte for byte.
		r, err := idem.Do(ctx, d.db, req("S-1", "fp-1"), handler(`{"refund_id": "F-1", "amount": 12.50}`))
		if err != nil || r.Outcome != idem.Executed {
			t.Fatalf("Do S-1 = %+v, %v", r, err)
		}
		again, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "S-1", Fingerprint: "fp-1"})
		if err != nil || again.Outcome != idem.Replayed ||
			string(again.Result) != `{"refund_id": "F-1", "amount": 12.50}` {
			t.Fatalf("idem serve's claim of S-1 = %+v (result %s), %v", again, again.Result, err)
		}
		// Another request under the same key, through idem serve: 422.
		if _, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "S-1", Fingerprint: "fp-2"}); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("idem serve's claim of S-1 with another fingerprint: %v", err)
		}

		// Stored through idem serve, replayed by the SQL API without running the handler.
		claim, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "H-1", Fingerprint: "fp-h"})
		if err != nil || claim.Outcome != idem.Acquired {
			t.Fatalf("idem serve's claim of H-1 = %+v, %v", claim, err)
		}
		if out, err := c.Complete(ctx, "refund", "H-1", claim.Token, json.RawMessage(`{"refund_id":"F-2"}`)); err != nil || out != "completed" {
			t.Fatalf("complete H-1 = %q, %v", out, err)
		}
		ran = 0
		r, err = idem.Do(ctx, d.db, req("H-1", "fp-h"), handler(`{"refund_id":"other"}`))
		if err != nil || r.Outcome != idem.Replayed || string(r.Result) != `{"refund_id":"F-2"}` || ran != 0 {
			t.Fatalf("Do H-1 = %+v (result %s, handler ran %d times), %v", r, r.Result, ran, err)
		}
		if _, err := idem.Do(ctx, d.db, req("H-1", "fp-other"), handler(`{}`)); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("Do H-1 with another fingerprint: %v", err)
		}

		// A lease idem serve holds is in progress for the SQL API.
		held, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "H-2", Fingerprint: "fp", LeaseMS: 60000})
		if err != nil || held.Outcome != idem.Acquired {
			t.Fatalf("idem serve's claim of H-2 = %+v, %v", held, err)
		}
		ran = 0
		r, err = idem.Do(ctx, d.db, req("H-2", "fp"), handler(`{}`))
		if err != nil || r.Outcome != idem.InProgress || r.Token != held.Token || ran != 0 {
			t.Fatalf("Do H-2 under idem serve's lease = %+v, %v (handler ran %d times)", r, err, ran)
		}

		// One record per key, in the tenant both used.
		for _, key := range []string{"S-1", "H-1", "H-2"} {
			if n := d.count(t, "SELECT COUNT(*) FROM idem_records WHERE idem_key = "+d.ph(1), key); n != 1 {
				t.Errorf("%s: %d records, want 1", key, n)
			}
		}
	})
}
