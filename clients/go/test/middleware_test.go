package test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

type answer struct {
	status int
	header http.Header
	body   string
}

// post sends body with the key ("" for none) and the headers given as name, value pairs.
func post(t *testing.T, url, key, body string, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func TestMiddlewareStoresTheFirstAnswerAndReplaysIt(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.createLedger(t)
		var runs int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := atomic.AddInt32(&runs, 1)
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), "fail") {
				http.Error(w, "upstream down", http.StatusBadGateway)
				return
			}
			tx, ok := idem.TxFromContext(r.Context())
			if !ok {
				http.Error(w, "no transaction", 500)
				return
			}
			key := r.Header.Get("Idempotency-Key")
			if _, err := tx.ExecContext(r.Context(), fmt.Sprintf("INSERT INTO ledger (refund_key, "+
				"refund_id, amount) VALUES (%s, %s, 1)", d.ph(1), d.ph(2)), key, fmt.Sprint(n)); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Set-Cookie", "session=1")
			w.Header().Add("X-Refund", "a")
			w.Header().Add("X-Refund", "b")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d}`, n)
		})
		srv := httptest.NewServer(idem.Middleware(d.db, idem.MiddlewareOptions{})(handler))
		defer srv.Close()

		first := post(t, srv.URL+"/refunds?x=1", "K-1", `{"amount":1}`)
		if first.status != 201 || first.body != `{"run":1}` || first.header.Get("Set-Cookie") != "session=1" ||
			first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %+v", first)
		}
		again := post(t, srv.URL+"/refunds?x=1", "K-1", `{"amount":1}`)
		if again.status != 201 || again.body != `{"run":1}` || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Content-Type") != "application/json" ||
			strings.Join(again.header.Values("X-Refund"), ",") != "a,b" || again.header.Get("Set-Cookie") != "" {
			t.Fatalf("replay: %+v", again)
		}
		mismatch := post(t, srv.URL+"/refunds?x=1", "K-1", `{"amount":2}`, "X-Request-Id", "m-1")
		if mismatch.status != 422 || mismatch.body != `{"type":"urn:idem:problem:fingerprint_mismatch",`+
			`"title":"Fingerprint mismatch","status":422,"detail":"this Idempotency-Key was used for `+
			`another request (the method, target or body differ)","outcome":"fingerprint_mismatch","request_id":"m-1"}` {
			t.Fatalf("other body: %+v", mismatch)
		}
		// A 5xx is not stored: the key stays free and the next try runs.
		failed := post(t, srv.URL+"/refunds", "K-2", `fail`)
		if failed.status != 502 || failed.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("5xx: %+v", failed)
		}
		retried := post(t, srv.URL+"/refunds", "K-2", `fail`)
		if retried.status != 502 || atomic.LoadInt32(&runs) != 3 {
			t.Fatalf("5xx retried: %+v after %d runs", retried, runs)
		}
		if n := d.count(t, "SELECT COUNT(*) FROM idem_records"); n != 1 || ledgerRows(t, d, "K-1") != 1 ||
			d.processing(t) != 0 {
			t.Fatalf("records %d, ledger rows of K-1 %d, processing %d; want 1, 1, 0", n,
				ledgerRows(t, d, "K-1"), d.processing(t))
		}
	})
}

func TestMiddlewareAnswers409WhileAnotherHoldsTheKey(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		d.holdLease(t, "http", "K-9")
		var runs int32
		srv := httptest.NewServer(idem.Middleware(d.db, idem.MiddlewareOptions{})(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) { atomic.AddInt32(&runs, 1) })))
		defer srv.Close()
		got := post(t, srv.URL+"/refunds", "K-9", `{}`, "X-Request-Id", "m-2")
		if got.status != 409 || got.body != `{"type":"urn:idem:problem:in_progress","title":"Conflict",`+
			`"status":409,"detail":"a request with this Idempotency-Key is still being processed",`+
			`"outcome":"in_progress","request_id":"m-2"}` || got.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%+v", got)
		}
		if ra, err := strconv.Atoi(got.header.Get("Retry-After")); err != nil || ra < 50 || ra > 60 ||
			runs != 0 {
			t.Fatalf("Retry-After %q (want the lease's ~60 s), %d runs", got.header.Get("Retry-After"), runs)
		}
	})
}

// Duplicates sent at once: one runs, the others wait for its commit and get its answer.
func TestMiddlewareConcurrentDuplicatesGetTheFirstAnswer(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		var runs int32
		srv := httptest.NewServer(idem.Middleware(d.db, idem.MiddlewareOptions{})(http.HandlerFunc(
			func(w http.ResponseWriter, r *http.Request) {
				n := atomic.AddInt32(&runs, 1)
				time.Sleep(50 * time.Millisecond)
				fmt.Fprintf(w, "run %d", n)
			})))
		defer srv.Close()
		answers := make(chan answer, 8)
		for i := 0; i < 8; i++ {
			go func() { answers <- post(t, srv.URL+"/refunds", "K-10", `{}`) }()
		}
		replayed := 0
		for i := 0; i < 8; i++ {
			a := <-answers
			if a.status != 200 || a.body != "run 1" {
				t.Errorf("answer %d: %+v", i, a)
			}
			if a.header.Get("Idempotent-Replayed") == "true" {
				replayed++
			}
		}
		if runs != 1 || replayed != 7 {
			t.Fatalf("%d runs, %d replayed; want 1, 7", runs, replayed)
		}
	})
}

// CanonicalJSON: the same JSON with other spacing and member order is the same
// request. ClientHeader: one key of two clients is two keys.
func TestMiddlewareCanonicalJSONAndKeysPerClient(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		var runs int32
		srv := httptest.NewServer(idem.Middleware(d.db, idem.MiddlewareOptions{CanonicalJSON: true,
			ClientHeader: "Authorization"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "run %d", atomic.AddInt32(&runs, 1))
		})))
		defer srv.Close()
		send := func(client, body string) answer {
			return post(t, srv.URL+"/refunds", "K-11", body, "Authorization", client)
		}
		if a := send("Bearer A", `{"amount": 1, "to": "x"}`); a.status != 200 || a.body != "run 1" {
			t.Fatalf("A first: %+v", a)
		}
		if a := send("Bearer A", `{"to":"x","amount":1}`); a.body != "run 1" ||
			a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("A, the same JSON written otherwise: %+v", a)
		}
		if a := send("Bearer A", `{"to":"x","amount":2}`); a.status != 422 {
			t.Fatalf("A, another amount: %+v", a)
		}
		if a := send("Bearer B", `{"to":"x","amount":2}`); a.status != 200 || a.body != "run 2" {
			t.Fatalf("B, the same key: %+v", a)
		}
		if n := d.count(t, "SELECT COUNT(DISTINCT tenant) FROM idem_records"); n != 2 {
			t.Fatalf("%d tenants; want one per client", n)
		}
	})
}

// CanonicalJSON fingerprints a body as idem proxy --fingerprint json does (RFC 8785:
// 12.50 is 12.5), so on one store a retry that moves between the proxy and the
// middleware is replayed, not 422 fingerprint_mismatch.
func TestMiddlewareAndIdemProxyReplayEachOthersJSONBodies(t *testing.T) {
	forEachDB(t, func(t *testing.T, d *testDB) {
		var upstreamRuns, middlewareRuns int32
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "upstream run %d", atomic.AddInt32(&upstreamRuns, 1))
		}))
		defer upstream.Close()
		proxy := startListening(t, nil, "proxy", "--listen", "127.0.0.1:0", "--upstream", upstream.URL,
			"--store", d.store, "--fingerprint", "json")
		// The proxy's records: biz_type http, tenant proxy (no --client-header).
		mw := httptest.NewServer(idem.Middleware(d.db, idem.MiddlewareOptions{BizType: "http",
			Tenant: "proxy", CanonicalJSON: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "middleware run %d", atomic.AddInt32(&middlewareRuns, 1))
		})))
		defer mw.Close()

		if a := post(t, proxy+"/pay", "J-1", `{"amount":12.50,"to":"x"}`); a.status != 201 || a.body != "upstream run 1" {
			t.Fatalf("through idem proxy: %+v", a)
		}
		for _, body := range []string{`{"amount":12.50,"to":"x"}`, `{"to":"x","amount":12.5}`} {
			if a := post(t, mw.URL+"/pay", "J-1", body); a.status != 201 || a.body != "upstream run 1" ||
				a.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the proxy's key through the middleware, %s: %+v", body, a)
			}
		}
		if a := post(t, mw.URL+"/pay", "J-2", `{"n":1.0,"e":1e3}`); a.status != 201 || a.body != "middleware run 1" {
			t.Fatalf("through the middleware: %+v", a)
		}
		if a := post(t, proxy+"/pay", "J-2", `{"e":1000,"n":1}`); a.status != 201 || a.body != "middleware run 1" ||
			a.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the middleware's key through idem proxy: %+v", a)
		}
		if a := post(t, mw.URL+"/pay", "J-1", `{"amount":12.51,"to":"x"}`); a.status != 422 {
			t.Fatalf("another amount: %+v", a)
		}
		if upstreamRuns != 1 || middlewareRuns != 1 {
			t.Fatalf("upstream ran %d times, the middleware's handler %d; want 1, 1", upstreamRuns, middlewareRuns)
		}
	})
}
