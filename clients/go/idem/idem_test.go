package idem

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseIdempotencyKeyAcceptsWhatIdemProxyAccepts(t *testing.T) {
	for in, want := range map[string]string{
		`abc-123`:                "abc-123",
		` R:2024/06#1 `:          "R:2024/06#1",
		`tok;ttl=5`:              "tok",
		`"quoted key"`:           "quoted key",
		`"a\"b\\c";param=1`:      `a"b\c`,
		strings.Repeat("k", 255): strings.Repeat("k", 255),
	} {
		got, err := ParseIdempotencyKey(in)
		if err != nil || got != want {
			t.Errorf("ParseIdempotencyKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseIdempotencyKeyNamesWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "the Idempotency-Key header is empty",
		`""`:                     "the Idempotency-Key is empty",
		`"abc`:                   "the Idempotency-Key string is unclosed",
		`"a\x"`:                  `the Idempotency-Key string has a '\' not followed by '"' or '\'`,
		"\"a\x01\"":              "the Idempotency-Key string may hold only printable ASCII",
		`"a"b`:                   "the Idempotency-Key has text after its closing quote",
		`a b`:                    "the Idempotency-Key must be a quoted string",
		strings.Repeat("k", 256): "key is 256 bytes, over the limit of 255",
	} {
		_, err := ParseIdempotencyKey(in)
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIdempotencyKey(%q) = %v; want %q", in, err, want)
		}
	}
}

func TestRequestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{Key: "k"}, "biz_type is empty"},
		{Request{BizType: "b"}, "key is empty"},
		{Request{BizType: "b", Key: "a\x00b"}, "key holds a NUL byte at byte 1"},
		{Request{BizType: "b", Key: "\xff"}, "key is not UTF-8"},
		{Request{BizType: "b", Key: "k", Tenant: strings.Repeat("t", 256)}, "tenant is 256 bytes"},
		{Request{BizType: "b", Key: "k", Fingerprint: strings.Repeat("f", 1025)},
			"fingerprint is 1025 bytes, over the limit of 1024"},
	} {
		if err := c.r.Validate(); !errors.Is(err, ErrInvalidRequest) ||
			!strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.r, err, c.want)
		}
	}
	if err := (Request{BizType: "b", Key: "k"}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestFingerprintJSONIgnoresSpacingAndMemberOrder(t *testing.T) {
	a, err1 := FingerprintJSON([]byte(`{"b": [1, 2.50], "a": "x"}`))
	b, err2 := FingerprintJSON(json.RawMessage(`{"a":"x","b":[1,2.50]}`))
	c, err3 := FingerprintJSON(map[string]any{"a": "x", "b": []json.Number{"1", "2.50"}})
	if err1 != nil || err2 != nil || err3 != nil || a != b || b != c || len(a) != 64 {
		t.Fatalf("%s %s %s (%v %v %v)", a, b, c, err1, err2, err3)
	}
	if d, _ := FingerprintJSON([]byte(`{"a":"x","b":[1,2.5]}`)); d == a {
		t.Fatal("2.5 and 2.50 must differ: numbers keep their digits")
	}
	if _, err := FingerprintJSON([]byte(`{"a":1} {}`)); err == nil {
		t.Fatal("two values accepted")
	}
	// The SHA-256 of "abc".
	if got := Fingerprint([]byte("abc")); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatal(got)
	}
}

// The canonical_json cases of the shared table, clients/cases.json (CASES.md gives
// the canonical form every client writes).
func TestCanonicalJSONAnswersTheSharedCases(t *testing.T) {
	data, err := os.ReadFile("../../cases.json") // from clients/go/idem, where go test runs
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		CanonicalJSON []struct {
			Name      string `json:"name"`
			JSON      string `json:"json"`
			Canonical string `json:"canonical"`
			SHA256    string `json:"sha256"`
			Error     bool   `json:"error"`
		} `json:"canonical_json"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.CanonicalJSON) == 0 {
		t.Fatal("cases.json has no canonical_json cases")
	}
	for _, c := range table.CanonicalJSON {
		got, err := CanonicalJSON([]byte(c.JSON))
		fp, fpErr := FingerprintJSON([]byte(c.JSON))
		switch {
		case c.Error && (err == nil || fpErr == nil):
			t.Errorf("%s: %q accepted as %q", c.Name, c.JSON, got)
		case c.Error:
		case err != nil || fpErr != nil:
			t.Errorf("%s: %q: %v %v", c.Name, c.JSON, err, fpErr)
		case string(got) != c.Canonical || fp != c.SHA256:
			t.Errorf("%s: %q gave %q (%s), want %q (%s)", c.Name, c.JSON, got, fp, c.Canonical, c.SHA256)
		}
	}
}

// tests/jcs_vectors.json, the RFC 8785 forms idem proxy --fingerprint json digests
// bodies by (its canonicalizer is checked against the same file): the middleware's
// fingerprint of each body is the proxy's, "jcs:" and the digest of the expected form,
// or of the body's bytes when the proxy refuses it.
func TestMiddlewareFingerprintsJSONBodiesAsIdemProxy(t *testing.T) {
	data, err := os.ReadFile("../../../tests/jcs_vectors.json") // from clients/go/idem
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Vectors []struct {
			Name      string  `json:"name"`
			JSON      *string `json:"json"`
			JSONHex   string  `json:"json_hex"`
			Canonical *string `json:"canonical"`
			Refused   bool    `json:"refused"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Vectors) == 0 {
		t.Fatal("jcs_vectors.json has no vectors")
	}
	m := &middleware{o: MiddlewareOptions{CanonicalJSON: true}}
	r := httptest.NewRequest("POST", "/pay?x=1", nil)
	for _, v := range table.Vectors {
		body := []byte{}
		if v.JSON != nil {
			body = []byte(*v.JSON)
		} else if body, err = hex.DecodeString(v.JSONHex); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if (v.Canonical == nil) != v.Refused {
			t.Fatalf("%s: give one of canonical, refused", v.Name)
		}
		digest := Fingerprint(body)
		if !v.Refused {
			digest = "jcs:" + Fingerprint([]byte(*v.Canonical))
		}
		want := Fingerprint([]byte("POST\n/pay?x=1\n" + digest))
		if got := m.fingerprint(r, body); got != want {
			canonical, err := rfc8785JSON(body)
			t.Errorf("%s: the fingerprint of %.80q is not the proxy's: RFC 8785 form %.80q (%v), want %.80q",
				v.Name, body, canonical, err, digest)
		}
	}
}

func TestCanonicalJSONRefusesWhatIsNotUTF8(t *testing.T) {
	for _, in := range []string{`"\ud800"`, "\"\xff\"", `{"\udc00":1}`} {
		_, err := CanonicalJSON([]byte(in))
		if err == nil || !strings.Contains(err.Error(), "at offset") {
			t.Errorf("%q: %v", in, err)
		}
	}
	if _, err := CanonicalJSON([]byte(`"\ud800"`)); err == nil || !strings.Contains(err.Error(), "lone surrogate \\ud800") {
		t.Errorf("lone surrogate: %v", err)
	}
	// A Go value is written as encoding/json writes it, then made canonical.
	got, err := FingerprintJSON(map[string]any{"s": "a\u2028\b", "n": 12.5, "\U0001F600": 1, "\ue000": 2})
	want := Fingerprint([]byte("{\"n\":12.5,\"s\":\"a\u2028\\b\",\"\ue000\":2,\"\U0001F600\":1}"))
	if err != nil || got != want {
		t.Errorf("%s %v, want %s", got, err, want)
	}
}

type sqlStateError string

func (e sqlStateError) Error() string    { return "sqlstate " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestIsTransientKnowsTheStoresFaults(t *testing.T) {
	for _, err := range []error{
		sqlStateError("40001"), sqlStateError("40P01"), sqlStateError("57P01"),
		sqlStateError("08006"), driver.ErrBadConn, io.ErrUnexpectedEOF,
		fmt.Errorf("write: %w", syscall.ECONNRESET), errors.New("invalid connection"),
		errors.New("Error 1213: Deadlock found when trying to get lock"),
		errors.New("Error 1927 (70100): Connection was killed"),
		errors.New("Error 1644: idem: the record of the key vanished three times during the claim"),
		errors.New("pq: unexpected message 'E'; expected ReadyForQuery"),
	} {
		if !IsTransient(err) {
			t.Errorf("IsTransient(%v) = false", err)
		}
	}
	for _, err := range []error{
		nil, sqlStateError("23505"), sqlStateError("22023"), sqlStateError("57014"),
		errors.New("card declined"),
		context.Canceled, errors.New("Error 1062: Duplicate entry"),
		errors.New("Error 1644: idem: key is empty"),
	} {
		if IsTransient(err) {
			t.Errorf("IsTransient(%v) = true", err)
		}
	}
}

func TestRetryDelayIsFullJitterUnderTheCap(t *testing.T) {
	r := Retry{MaxAttempts: 10, BaseDelay: 10 * time.Millisecond, MaxDelay: 80 * time.Millisecond}
	for n := 1; n <= 8; n++ {
		limit := 10 * time.Millisecond << (n - 1)
		if limit > 80*time.Millisecond {
			limit = 80 * time.Millisecond
		}
		for i := 0; i < 200; i++ {
			if d := r.Delay(n); d < 0 || d >= limit {
				t.Fatalf("Delay(%d) = %v, outside [0, %v)", n, d, limit)
			}
		}
	}
}

func TestRetryStopsAtMaxAttemptsAndAtAFinalError(t *testing.T) {
	r := Retry{MaxAttempts: 4, BaseDelay: time.Microsecond}
	calls := 0
	n, err := r.do(context.Background(), IsTransient, func() error { calls++; return driver.ErrBadConn })
	if n != 4 || calls != 4 || !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("transient: %d attempts, %d calls, %v", n, calls, err)
	}
	calls = 0
	n, err = r.do(context.Background(), IsTransient, func() error { calls++; return errors.New("final") })
	if n != 1 || calls != 1 || err == nil {
		t.Fatalf("final: %d attempts, %d calls, %v", n, calls, err)
	}
}

// The SQL API's errors match their sentinels, from either driver.
func TestSQLAPIErrorsMatchTheirSentinels(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{sqlStateError("IDM01"), ErrNotFound},
		{sqlStateError("IDM03"), ErrLeaseLost},
		{sqlStateError("22023"), ErrInvalidRequest},
		{errors.New("Error 1644: idem: key_reused: the key belongs to biz_type x"), ErrKeyReused},
		{errors.New("Error 1644: idem: already_finished: the claim with token 3"), ErrConflict},
		{errors.New("Error 1644: idem: fingerprint is 300 bytes, over the limit of 255"),
			ErrInvalidRequest},
	} {
		if err := apiError(c.err); !errors.Is(err, c.want) || !errors.Is(err, c.err) {
			t.Errorf("apiError(%v) = %v; want it to match %v", c.err, err, c.want)
		}
	}
	if err := apiError(nil); err != nil {
		t.Errorf("apiError(nil) = %v", err)
	}
	if err := apiError(sqlStateError("23505")); err != sqlStateError("23505") {
		t.Errorf("another SQLSTATE is changed: %v", err)
	}
}

type declined struct{}

func (declined) Error() string                { return "declined" }
func (declined) FailureJSON() json.RawMessage { return json.RawMessage(`{"code": "DECLINED"}`) }
func (declined) Permanent() bool              { return true }

func TestDoChecksItsArgumentsBeforeTheStore(t *testing.T) {
	ok := func(context.Context, *sql.Tx) (json.RawMessage, error) { return nil, nil }
	if _, err := Do(context.Background(), nil, Request{BizType: "b"}, ok); !errors.Is(err, ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "key is empty") {
		t.Errorf("empty key: %v", err)
	}
	if _, err := Do(context.Background(), nil, Request{BizType: "b", Key: "k"}, ok); err == nil ||
		err.Error() != "idem: Do needs a *sql.DB and a handler" {
		t.Errorf("nil db: %v", err)
	}
}

func TestRequestIDIsTheClientsWhenValid(t *testing.T) {
	for id, kept := range map[string]bool{"abc-1.2:3_4": true, strings.Repeat("a", 128): true,
		"": false, "a b": false, strings.Repeat("a", 129): false, "ä": false} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-Request-Id", id)
		got := requestID(r)
		if (got == id) != kept || (!kept && len(got) != 32) {
			t.Errorf("X-Request-Id %q: %q", id, got)
		}
	}
}

func TestPermanentAndFailureJSON(t *testing.T) {
	base := errors.New(`bad "card"`)
	if !IsPermanent(Permanent(base)) || !errors.Is(Permanent(base), base) || IsPermanent(base) ||
		Permanent(nil) != nil {
		t.Fatal("Permanent marks and unwraps")
	}
	if got := string(FailureJSON(Permanent(base))); got != `{"error":"bad \"card\""}` {
		t.Fatal(got)
	}
	wrapped := fmt.Errorf("refund: %w", declined{})
	if !IsPermanent(wrapped) || string(FailureJSON(wrapped)) != `{"code": "DECLINED"}` {
		t.Fatal("an error's own Permanent and FailureJSON methods are used")
	}
}

func TestProblemErrorMatchesItsOutcome(t *testing.T) {
	p := &ProblemError{Status: 409, Type: "urn:idem:problem:lease_lost", Outcome: "lease_lost"}
	if !errors.Is(p, ErrLeaseLost) || errors.Is(p, ErrConflict) || errors.Is(p, ErrUnavailable) {
		t.Fatal("409 lease_lost")
	}
	p = &ProblemError{Status: 503, Type: "urn:idem:problem:store_unavailable"}
	if !errors.Is(p, ErrUnavailable) {
		t.Fatal("503")
	}
	if got := p.Error(); got != "idem: 503 store_unavailable: " {
		t.Fatal(got)
	}
}

// The problem bodies the middleware writes before it needs a store, as idem proxy
// writes them.
func TestMiddlewareRefusesBadKeysAndBodiesBeforeTheStore(t *testing.T) {
	h := Middleware(nil, MiddlewareOptions{MaxBodyBytes: 8, ClientHeader: "X-Client"})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) }))
	for _, c := range []struct {
		method, key, body string
		clients           []string
		status            int
		want              string
	}{
		{"GET", "", "", nil, 299, ""}, // not a guarded method: passed through
		{"POST", "k", "{}", nil, 400, `{"type":"urn:idem:problem:missing_client_identity",` +
			`"title":"Bad Request","status":400,"detail":"keys are kept per client here, and the ` +
			`request has no X-Client header"}`},
		{"POST", "k", "{}", []string{"a", "b"}, 400, `{"type":"urn:idem:problem:` +
			`ambiguous_client_identity","title":"Bad Request","status":400,"detail":"keys are kept ` +
			`per client here, and the X-Client header is given more than once; send it once"}`},
		{"POST", "", "{}", []string{"a"}, 400, `{"type":"urn:idem:problem:missing_idempotency_key","title":"Bad Request",` +
			`"status":400,"detail":"POST needs an Idempotency-Key header here (a unique value per ` +
			`operation, the same on every retry)"}`},
		{"POST", "a b", "{}", []string{"a"}, 400, `{"type":"urn:idem:problem:invalid_idempotency_key","title":"Bad Request",` +
			`"status":400,"detail":"the Idempotency-Key must be a quoted string (\"...\") or a token of ` +
			`letters, digits and !#$%&'*+-.^_` + "`" + `|~:/"}`},
		{"PATCH", "k", "123456789", []string{"a"}, 413, `{"type":"about:blank","title":"Content Too Large",` +
			`"status":413,"detail":"the request body is larger than 8 bytes"}`},
	} {
		req := httptest.NewRequest(c.method, "/refunds", strings.NewReader(c.body))
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		req.Header.Set("X-Request-Id", "t-1")
		for _, client := range c.clients {
			req.Header.Add("X-Client", client)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		want := c.want
		if want != "" { // the request's id ends every problem, as idem serve's renderer writes it
			want = strings.TrimSuffix(want, "}") + `,"request_id":"t-1"}`
		}
		if rec.Code != c.status || rec.Body.String() != want {
			t.Errorf("%s key %q: %d %s; want %d %s", c.method, c.key, rec.Code, rec.Body, c.status, want)
		}
		if want != "" && (rec.Header().Get("Content-Type") != "application/problem+json" ||
			rec.Header().Get("X-Request-Id") != "t-1") {
			t.Errorf("%s key %q: headers %v", c.method, c.key, rec.Header())
		}
	}
}

func TestTheClientSendsItsVersion(t *testing.T) {
	var agent string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent = r.Header.Get("User-Agent")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"outcome":"acquired","token":7,"lease_until":"2030-01-01T00:00:00Z","takeover":false,"expires_at":null}`)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(context.Background(), ClaimRequest{BizType: "b", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if agent != "idem-go/"+Version || Version == "" {
		t.Fatalf("User-Agent %q", agent)
	}
}
