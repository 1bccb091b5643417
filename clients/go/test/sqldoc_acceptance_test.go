package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

// sqlDocGoBlock is the one ```go block of docs/sql.md.
func sqlDocGoBlock(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(doc), "\n```go\n")
	if len(parts) != 2 {
		t.Fatalf("docs/sql.md has %d ```go blocks; want 1", len(parts)-1)
	}
	end := strings.Index(parts[1], "\n```\n")
	if end < 0 {
		t.Fatal("docs/sql.md: the ```go block does not end")
	}
	return parts[1][:end]
}

// The code docs/sql.md shows is the code the next test runs: sqldoc_refund_test.go
// from its import on, byte for byte after trimming.
func TestRefundSQLDocExampleIsTheTestedCode(t *testing.T) {
	src, err := os.ReadFile("sqldoc_refund_test.go")
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(src), "\nimport (")
	if at < 0 {
		t.Fatal("sqldoc_refund_test.go has no import block")
	}
	want := strings.TrimSpace(string(src[at:]))
	got := strings.TrimSpace(sqlDocGoBlock(t))
	if got == want {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gotLines) || i < len(wantLines); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/sql.md's Go block differs from sqldoc_refund_test.go at the block's "+
				"line %d:\n  doc:  %q\n  test: %q", i+1, g, w)
		}
	}
}

// injectLedgerRollbacks makes one ledger insert in `percent` fail (a trigger raising
// "injected rollback"), so the refund's transaction rolls back after its claim.
func (d *testDB) injectLedgerRollbacks(t *testing.T, percent int) {
	t.Helper()
	if d.dialect == idem.Postgres {
		d.exec(t, fmt.Sprintf(`CREATE FUNCTION ledger_inject_rollback() RETURNS trigger
			LANGUAGE plpgsql AS $$ BEGIN IF random() < %d / 100.0 THEN
			RAISE EXCEPTION 'injected rollback'; END IF; RETURN NEW; END $$`, percent))
		d.exec(t, `CREATE TRIGGER ledger_inject_rollback BEFORE INSERT ON ledger
			FOR EACH ROW EXECUTE FUNCTION ledger_inject_rollback()`)
		return
	}
	d.exec(t, fmt.Sprintf(`CREATE TRIGGER ledger_inject_rollback BEFORE INSERT ON ledger
		FOR EACH ROW BEGIN IF RAND() < %d / 100 THEN SIGNAL SQLSTATE '45000'
		SET MESSAGE_TEXT = 'injected rollback'; END IF; END`, percent))
}

// killConnectionsUntil kills, every 5-25 ms until ctx ends, a random connection of
// the test database in a transaction (PostgreSQL) or running a statement (MariaDB,
// whose processlist shows a transaction between statements as a pooled connection,
// Sleep), from the admin pool. It answers the number killed when ctx ends.
func (d *testDB) killConnectionsUntil(ctx context.Context) <-chan int64 {
	q := "SELECT id FROM information_schema.processlist WHERE db = DATABASE() " +
		"AND id <> CONNECTION_ID() AND command <> 'Sleep' ORDER BY RAND() LIMIT 1"
	if d.dialect == idem.Postgres {
		q = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() " +
			"AND backend_type = 'client backend' AND pid <> pg_backend_pid() " +
			"AND xact_start IS NOT NULL ORDER BY random() LIMIT 1"
	}
	done := make(chan int64, 1)
	go func() {
		var kills int64
		rng := rand.New(rand.NewSource(time.Now().UnixNano()))
		for ctx.Err() == nil {
			time.Sleep(time.Duration(5+rng.Intn(20)) * time.Millisecond)
			var id int64
			if err := d.admin.QueryRowContext(ctx, q).Scan(&id); err != nil {
				continue // none open right now, or ctx ended
			}
			if d.kill(id) == nil {
				kills++
			}
		}
		done <- kills
	}()
	return done
}

// The acceptance test of docs/sql.md's Go example: Refund, written with database/sql
// and a driver only, delivered 16 times at once for each of 1,000 keys on PostgreSQL
// and MariaDB, while a trigger fails one ledger insert in ten (rolling the claim
// back) and connections of the pool are killed from a second connection. Every key
// ends with one ledger row and a SUCCEEDED record, every delivery is answered the
// result that committed, nothing stays PROCESSING.
func TestRefundFromTheSQLDocExactlyOnceUnderDuplicatesRollbacksAndKills(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		d.injectLedgerRollbacks(t, 10)
		q := refundOnPostgres
		if d.dialect == idem.MySQL {
			q = refundOnMySQL
		}
		d.db.SetMaxOpenConns(2 * acceptanceKeysAtOnce * acceptanceDuplicates)
		d.db.SetMaxIdleConns(2 * acceptanceKeysAtOnce * acceptanceDuplicates)
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		killing, stopKilling := context.WithCancel(ctx)
		killed := d.killConnectionsUntil(killing)

		var deliveries, rollbacks, inProgress, gaveUp int64
		answers := newAnswers()
		deliver := func(k, dup int, rng *rand.Rand) error {
			key := fmt.Sprintf("R-%04d", k)
			for delivery := 1; delivery <= 500; delivery++ {
				atomic.AddInt64(&deliveries, 1)
				result, err := Refund(ctx, d.db, q, key, 100)
				switch {
				case err == nil:
					var body struct {
						RefundID string `json:"refund_id"`
					}
					if err := json.Unmarshal(result, &body); err != nil || body.RefundID == "" {
						return fmt.Errorf("%s: result %s: %v", key, result, err)
					}
					answers[k][dup] = body.RefundID
					return nil
				case strings.Contains(err.Error(), "injected rollback"):
					atomic.AddInt64(&rollbacks, 1)
				case errors.Is(err, ErrRefundInProgress):
					atomic.AddInt64(&inProgress, 1)
					time.Sleep(time.Duration(1+rng.Intn(5)) * time.Millisecond)
				case retryable(err): // Refund's attempts ran out: redelivered, as a queue would
					atomic.AddInt64(&gaveUp, 1)
				default:
					return fmt.Errorf("%s delivery %d: %w", key, dup, err)
				}
			}
			return fmt.Errorf("%s delivery %d: no answer after 500 redeliveries", key, dup)
		}

		start := time.Now()
		deliverConcurrently(t, deliver)
		stopKilling()
		kills := <-killed
		t.Logf("%s: %d deliveries, %d injected rollbacks, %d connections killed, %d in progress, "+
			"%d out of attempts, %s", d.name, deliveries, rollbacks, kills, inProgress, gaveUp,
			time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			return
		}
		if rollbacks == 0 || kills == 0 {
			t.Fatalf("no faults injected (rollbacks %d, kills %d)", rollbacks, kills)
		}
		d.checkRefundedOnce(t, answers)
	})
}
