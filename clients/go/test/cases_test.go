package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

// The shared case table, clients/cases.json (clients/CASES.md says how to read it):
// every decorator case through idem.Do on PostgreSQL and on MariaDB, every http case
// through idem.Client against an idem serve that keeps biz_type `expiring` 1 s.
// A field this runner does not know fails the case instead of being ignored.

const casesFile = "../../cases.json" // from clients/go/test, where go test runs

type caseTable struct {
	About     []string   `json:"about"`
	Version   int        `json:"version"`
	Decorator []caseSpec `json:"decorator"`
	HTTP      []caseSpec `json:"http"`
	// The canonical_json cases run in the idem package's own tests (go.unit).
	CanonicalJSON json.RawMessage `json:"canonical_json"`
}

type caseSpec struct {
	Name  string            `json:"name"`
	Only  []string          `json:"only"`
	Steps []json.RawMessage `json:"steps"`
}

// caseKey names a key by alias, or exactly (key_literal).
type caseKey struct {
	Key        *string `json:"key"`
	KeyLiteral *string `json:"key_literal"`
	BizType    string  `json:"biz_type"`
}

type caseHandler struct {
	Returns         json.RawMessage `json:"returns"`
	Fails           string          `json:"fails"`
	Message         string          `json:"message"`
	TransientFaults int             `json:"transient_faults"`
	SleepMS         int             `json:"sleep_ms"`
}

// decoratorCall is a decorator step's call.
type decoratorCall struct {
	caseKey
	Fingerprint string      `json:"fingerprint"`
	RetentionS  int         `json:"retention_s"`
	Handler     caseHandler `json:"handler"`
	Concurrent  int         `json:"concurrent"`
	WaitMS      int         `json:"wait_ms"` // the SQL API waits on the row lock instead
}

// httpCall is an http step's claim, complete or fail.
type httpCall struct {
	caseKey
	Fingerprint string          `json:"fingerprint"`
	LeaseMS     int             `json:"lease_ms"`
	Token       string          `json:"token"`
	Result      json.RawMessage `json:"result"`
	Retryable   bool            `json:"retryable"`
	Error       json.RawMessage `json:"error"`
}

type caseExpect struct {
	Outcome       string          `json:"outcome"`
	Outcomes      map[string]int  `json:"outcomes"`
	Result        json.RawMessage `json:"result"`
	ErrorContains *string         `json:"error_contains"`
	HandlerRuns   *int32          `json:"handler_runs"`
	LedgerRows    *int            `json:"ledger_rows"`
	Takeover      *bool           `json:"takeover"`
	SaveToken     string          `json:"save_token"`
	ErrorJSON     json.RawMessage `json:"error_json"`
	Error         string          `json:"error"`
	Status        int             `json:"status"`
	RetryAfter    *bool           `json:"retry_after"`
	ClientSide    *bool           `json:"client_side"`
}

type caseStep struct {
	Call     *decoratorCall `json:"call"`
	Claim    *httpCall      `json:"claim"`
	Complete *httpCall      `json:"complete"`
	Fail     *httpCall      `json:"fail"`
	Purge    *caseKey       `json:"purge"`
	SleepMS  int            `json:"sleep_ms"`
	Expect   *caseExpect    `json:"expect"`
}

func loadCases(t *testing.T) caseTable {
	t.Helper()
	data, err := os.ReadFile(casesFile)
	if err != nil {
		t.Fatal(err)
	}
	var table caseTable
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&table); err != nil {
		t.Fatalf("%s: %v", casesFile, err)
	}
	return table
}

// runsIn: the case's "only", when given, names one of these runners.
func (c caseSpec) runsIn(runners ...string) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, o := range c.Only {
		for _, r := range runners {
			if o == r {
				return true
			}
		}
	}
	return false
}

// steps decodes a case's steps, refusing a field this runner does not know.
func (c caseSpec) steps(t *testing.T) []caseStep {
	t.Helper()
	out := make([]caseStep, len(c.Steps))
	for i, raw := range c.Steps {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out[i]); err != nil {
			t.Fatalf("step %d: this runner cannot run %s: %v", i+1, raw, err)
		}
	}
	return out
}

// caseRun is one run of a case: its keys (new for the run), handler runs, tokens.
type caseRun struct {
	name, suffix string
	runs         int32
	mu           sync.Mutex
	tokens       map[string]int64
	expires      map[string]time.Time // a key's expires_at, from its claim
}

func newCaseRun(t *testing.T, name string) *caseRun {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return &caseRun{name: name, suffix: hex.EncodeToString(b), tokens: map[string]int64{},
		expires: map[string]time.Time{}}
}

func (r *caseRun) key(t *testing.T, k caseKey) string {
	switch {
	case k.KeyLiteral != nil:
		return *k.KeyLiteral
	case k.Key != nil:
		return "cases-" + r.name + "-" + *k.Key + "-" + r.suffix
	}
	t.Fatal("a step names no key")
	return ""
}

// jsonEqual compares two JSON texts as values.
func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// caseAnswer is what one decorator call did, in the table's words.
type caseAnswer struct {
	outcome string
	result  json.RawMessage
	text    string // the stored failure's JSON, or the error's message
}

// serializationFailure makes the database raise SQLSTATE 40001 in tx.
func (d *testDB) serializationFailure(ctx context.Context, tx *sql.Tx) error {
	q := "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213" // a deadlock's numbers
	if d.dialect == idem.Postgres {
		q = "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40001'; END $$"
	}
	_, err := tx.ExecContext(ctx, q)
	if err == nil {
		err = errors.New("the serialization failure was not raised")
	}
	return err
}

// doCall makes one call of the step through idem.Do (any goroutine: no t here).
func (r *caseRun) doCall(d *testDB, call *decoratorCall, key string) (caseAnswer, error) {
	ctx := context.Background()
	h := call.Handler
	own := errors.New(h.Message) // the handler's error, when it fails
	handler := func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
		n := atomic.AddInt32(&r.runs, 1)
		time.Sleep(time.Duration(h.SleepMS) * time.Millisecond)
		switch h.Fails {
		case "permanent":
			return nil, idem.Permanent(own)
		case "retryable":
			return nil, own
		case "":
		default:
			return nil, fmt.Errorf("unknown handler failure %q", h.Fails)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO case_ledger (case_run) VALUES ("+d.ph(1)+")",
			r.suffix); err != nil {
			return nil, err
		}
		if int(n) <= h.TransientFaults {
			return nil, d.serializationFailure(ctx, tx)
		}
		return h.Returns, nil
	}
	var opts []idem.Option
	if call.RetentionS > 0 {
		opts = append(opts, idem.WithRetention(time.Duration(call.RetentionS)*time.Second))
	}
	res, err := idem.Do(ctx, d.db, idem.Request{BizType: call.BizType, Key: key,
		Fingerprint: call.Fingerprint}, handler, opts...)
	if res.ExpiresAt != nil {
		r.mu.Lock()
		r.expires[key] = *res.ExpiresAt
		r.mu.Unlock()
	}
	switch {
	case err == nil:
		return caseAnswer{outcome: string(res.Outcome), result: res.Result, text: string(res.Error)}, nil
	case res.Outcome == idem.Failed && errors.Is(err, own):
		return caseAnswer{outcome: "failed", text: string(res.Error)}, nil
	case res.Outcome == "" && errors.Is(err, own):
		return caseAnswer{outcome: "error", text: err.Error()}, nil
	case res.Attempts == 0 && errors.Is(err, idem.ErrInvalidRequest): // no transaction begun
		return caseAnswer{outcome: "invalid_request", text: err.Error()}, nil
	case res.Outcome == idem.KeyReused || res.Outcome == idem.FingerprintMismatch ||
		res.Outcome == idem.Expired:
		return caseAnswer{outcome: string(res.Outcome), text: err.Error()}, nil
	}
	return caseAnswer{}, fmt.Errorf("Do = %+v, %w", res, err)
}

func checkCaseAnswer(t *testing.T, a caseAnswer, e *caseExpect, single bool) {
	t.Helper()
	if single && e.Outcome != "" && a.outcome != e.Outcome {
		t.Fatalf("outcome %q (%s%s), want %q", a.outcome, a.result, a.text, e.Outcome)
	}
	if e.Result != nil && !jsonEqual(a.result, e.Result) {
		t.Fatalf("%s answered %s, want %s", a.outcome, a.result, e.Result)
	}
	if e.ErrorContains != nil && !strings.Contains(a.text, *e.ErrorContains) {
		t.Fatalf("%s: %q does not hold %q", a.outcome, a.text, *e.ErrorContains)
	}
}

// purgeSQL waits out the key's retention, then runs `idem purge` until the key's
// record is a tombstone.
func (r *caseRun) purgeSQL(t *testing.T, d *testDB, k caseKey) {
	key := r.key(t, k)
	at, ok := r.expires[key]
	if !ok {
		t.Fatalf("purge: %s has no expires_at (no retention_s?)", key)
	}
	time.Sleep(time.Until(at) + 50*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(idemBinary(t), "purge", "--store", d.store).CombinedOutput()
		if err != nil {
			t.Fatalf("idem purge: %v\n%s", err, out)
		}
		if d.count(t, "SELECT COUNT(*) FROM idem_records WHERE idem_key = "+d.ph(1)+
			" AND purged_at IS NOT NULL", key) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is no tombstone after idem purge:\n%s", key, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *caseRun) decoratorStep(t *testing.T, d *testDB, s caseStep) {
	if s.Purge != nil {
		r.purgeSQL(t, d, *s.Purge)
		return
	}
	if s.Call == nil || s.Expect == nil || s.Claim != nil || s.Complete != nil || s.Fail != nil ||
		s.SleepMS != 0 {
		t.Fatalf("a decorator step is a call with an expect, or a purge: %+v", s)
	}
	e := s.Expect
	n := s.Call.Concurrent
	if n < 1 {
		n = 1
	}
	key := r.key(t, s.Call.caseKey)
	answers := make([]caseAnswer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func(i int) { // each call on its own connection of the pool
			defer wg.Done()
			<-start
			answers[i], errs[i] = r.doCall(d, s.Call, key)
		}(i)
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if e.Outcomes != nil {
		got := map[string]int{}
		for _, a := range answers {
			got[a.outcome]++
		}
		if !reflect.DeepEqual(got, e.Outcomes) {
			t.Fatalf("outcomes %v, want %v", got, e.Outcomes)
		}
	}
	for _, a := range answers {
		checkCaseAnswer(t, a, e, n == 1)
	}
	if e.HandlerRuns != nil && atomic.LoadInt32(&r.runs) != *e.HandlerRuns {
		t.Fatalf("the handler ran %d times, want %d", r.runs, *e.HandlerRuns)
	}
	if e.LedgerRows != nil {
		if rows := d.count(t, "SELECT COUNT(*) FROM case_ledger WHERE case_run = "+d.ph(1),
			r.suffix); rows != *e.LedgerRows {
			t.Fatalf("%d ledger rows, want %d", rows, *e.LedgerRows)
		}
	}
}

// TestCasesDecorator runs every decorator case through idem.Do, on PostgreSQL and
// on MariaDB.
func TestCasesDecorator(t *testing.T) {
	table := loadCases(t)
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.exec(t, "CREATE TABLE case_ledger (case_run VARCHAR(64) NOT NULL)")
		for _, c := range table.Decorator {
			c := c
			if !c.runsIn("sql", "go") {
				continue
			}
			t.Run(c.Name, func(t *testing.T) {
				r := newCaseRun(t, c.Name)
				for _, s := range c.steps(t) {
					r.decoratorStep(t, d, s)
				}
			})
		}
	})
}

// countingTransport counts the requests a client sends.
type countingTransport struct{ sent int32 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	atomic.AddInt32(&c.sent, 1)
	return http.DefaultTransport.RoundTrip(req)
}

// caseErrors names the client's typed errors as the table does.
var caseErrors = []struct {
	name string
	err  error
}{
	{"in_progress", idem.ErrInProgress}, {"fingerprint_mismatch", idem.ErrFingerprintMismatch},
	{"key_reused", idem.ErrKeyReused}, {"lease_lost", idem.ErrLeaseLost},
	{"expired", idem.ErrExpired}, {"conflict", idem.ErrConflict},
	{"not_found", idem.ErrNotFound}, {"invalid_request", idem.ErrInvalidRequest},
	{"unavailable", idem.ErrUnavailable},
}

func (r *caseRun) purgeHTTP(t *testing.T, c *idem.Client, k caseKey) {
	key := r.key(t, k)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.GetRecord(context.Background(), k.BizType, key)
		var p *idem.ProblemError
		if errors.As(err, &p) && p.Status == 410 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not purged in 10 s: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *caseRun) httpStep(t *testing.T, c *idem.Client, sent *countingTransport, s caseStep) {
	ctx := context.Background()
	switch {
	case s.SleepMS > 0:
		time.Sleep(time.Duration(s.SleepMS) * time.Millisecond)
		return
	case s.Purge != nil:
		r.purgeHTTP(t, c, *s.Purge)
		return
	case s.Call != nil || s.Expect == nil:
		t.Fatalf("an http step is a claim, complete or fail with an expect, a sleep_ms or a purge: %+v", s)
	}
	e := s.Expect
	before := atomic.LoadInt32(&sent.sent)
	var claim idem.Claim
	var outcome string
	var err error
	switch {
	case s.Claim != nil:
		claim, err = c.Claim(ctx, idem.ClaimRequest{BizType: s.Claim.BizType, Key: r.key(t, s.Claim.caseKey),
			Fingerprint: s.Claim.Fingerprint, LeaseMS: s.Claim.LeaseMS})
		outcome = string(claim.Outcome)
	case s.Complete != nil:
		outcome, err = c.Complete(ctx, s.Complete.BizType, r.key(t, s.Complete.caseKey),
			r.token(t, s.Complete.Token), s.Complete.Result)
	case s.Fail != nil:
		outcome, err = c.Fail(ctx, s.Fail.BizType, r.key(t, s.Fail.caseKey), r.token(t, s.Fail.Token),
			s.Fail.Retryable, s.Fail.Error)
	default:
		t.Fatalf("a step without a call: %+v", s)
	}
	if err != nil {
		if e.Error == "" {
			t.Fatalf("unexpected error: %v", err)
		}
		name := ""
		for _, ce := range caseErrors {
			if errors.Is(err, ce.err) {
				name = ce.name
				break
			}
		}
		var p *idem.ProblemError
		isProblem := errors.As(err, &p)
		switch {
		case name != e.Error:
			t.Fatalf("error %v is %q, want %q", err, name, e.Error)
		case e.Status != 0 && (!isProblem || p.Status != e.Status):
			t.Fatalf("error %v: want status %d", err, e.Status)
		case e.RetryAfter != nil && (isProblem && p.RetryAfter > 0) != *e.RetryAfter:
			t.Fatalf("error %v: Retry-After given is not %v", err, *e.RetryAfter)
		case e.ClientSide != nil && (!isProblem && atomic.LoadInt32(&sent.sent) == before) != *e.ClientSide:
			t.Fatalf("error %v: refused before sending is not %v", err, *e.ClientSide)
		case e.ErrorContains != nil && !strings.Contains(err.Error(), *e.ErrorContains):
			t.Fatalf("error %v does not hold %q", err, *e.ErrorContains)
		}
		return
	}
	switch {
	case e.Error != "":
		t.Fatalf("answered %q, want the error %s", outcome, e.Error)
	case e.Outcome != "" && outcome != e.Outcome:
		t.Fatalf("outcome %q, want %q", outcome, e.Outcome)
	case e.Takeover != nil && (outcome != "acquired" || claim.Takeover != *e.Takeover):
		t.Fatalf("%s takeover %v, want %v", outcome, claim.Takeover, *e.Takeover)
	case e.Result != nil && (outcome != "replayed" || !jsonEqual(claim.Result, e.Result)):
		t.Fatalf("%s result %s, want %s", outcome, claim.Result, e.Result)
	case e.ErrorJSON != nil && (outcome != "cached_failure" || !jsonEqual(claim.Error, e.ErrorJSON)):
		t.Fatalf("%s error %s, want %s", outcome, claim.Error, e.ErrorJSON)
	case e.SaveToken != "" && outcome != "acquired":
		t.Fatalf("%s: no token to save", outcome)
	}
	if e.SaveToken != "" {
		r.tokens[e.SaveToken] = claim.Token
	}
}

func (r *caseRun) token(t *testing.T, name string) int64 {
	tok, ok := r.tokens[name]
	if !ok {
		t.Fatalf("no saved token %q", name)
	}
	return tok
}

// casesServeConfig is the idem serve config of clients/CASES.md: biz_type expiring
// kept 1 s, its tombstones an hour.
const casesServeConfig = `[retention.expiring]
redelivery = "1s"
recon_cycle = "0s"
confirm_window = "0s"
margin = "0s"
tombstone = "1h"
`

// TestCasesHTTPClient runs every http case through idem.Client.
func TestCasesHTTPClient(t *testing.T) {
	table := loadCases(t)
	config := filepath.Join(t.TempDir(), "idem.toml")
	if err := os.WriteFile(config, []byte(casesServeConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServeWith(t, "sqlite://"+filepath.Join(t.TempDir(), "idem.db"),
		[]string{"--config", config}, []string{"--purge-every", "1s"})
	for _, c := range table.HTTP {
		c := c
		if !c.runsIn("go") {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			client := s.client(t, s.token1)
			sent := &countingTransport{}
			client.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: sent}
			r := newCaseRun(t, c.Name)
			for _, step := range c.steps(t) {
				r.httpStep(t, client, sent, step)
			}
		})
	}
}
