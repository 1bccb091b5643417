package test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-io/idem/clients/go/idem"
)

// A running `idem serve` ($IDEM_BIN) on an SQLite store of the test, two tenants.
type server struct {
	url            string
	token1, token2 string
}

func randomToken(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func startServe(t *testing.T) *server {
	t.Helper()
	return startServeOn(t, "sqlite://"+filepath.Join(t.TempDir(), "idem.db"))
}

// startServeOn is startServe on the store `store`.
func startServeOn(t *testing.T, store string) *server {
	t.Helper()
	return startServeWith(t, store, nil, nil)
}

// startServeWith is startServeOn with idem's global options (--config) and more of
// serve's.
func startServeWith(t *testing.T, store string, global, serve []string) *server {
	t.Helper()
	s := &server{token1: randomToken(t), token2: randomToken(t)}
	args := []string{"--listen", "127.0.0.1:0", "--store", store,
		"--tenant", "t1:" + tokenHash(s.token1), "--tenant", "t2:" + tokenHash(s.token2)}
	s.url = startListening(t, global, "serve", append(args, serve...)...)
	return s
}

// startListening runs the built idem's command (serve, proxy: one that listens where
// args say, port 0, and says "listening on ADDR" first) after its global options, and
// answers http://ADDR; it is stopped with SIGTERM when the test ends, and must then
// exit cleanly.
func startListening(t *testing.T, global []string, command string, args ...string) string {
	t.Helper()
	cmd := exec.Command(idemBinary(t), append(append(append([]string{}, global...), command), args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	first := make(chan string, 1)
	go func() {
		line, _ := lines.ReadString('\n')
		first <- strings.TrimSpace(line)
		io.Copy(io.Discard, lines) //nolint:errcheck // keeps the pipe drained
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(30 * time.Second):
	}
	if !strings.HasPrefix(line, "listening on ") {
		cmd.Process.Kill() //nolint:errcheck
		cmd.Wait()         //nolint:errcheck
		t.Fatalf("idem %s did not start (first line %q); log:\n%s", command, line, log.String())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		if err := cmd.Wait(); err != nil {
			t.Errorf("idem %s on SIGTERM: %v; log:\n%s", command, err, log.String())
		}
	})
	return "http://" + strings.TrimPrefix(line, "listening on ")
}

func (s *server) client(t *testing.T, token string) *idem.Client {
	c, err := idem.NewClient(s.url, token)
	if err != nil {
		t.Fatal(err)
	}
	c.Retry = idem.Retry{MaxAttempts: 1}
	return c
}

func TestClientAgainstIdemServe(t *testing.T) {
	s := startServe(t)
	c := s.client(t, s.token1)
	ctx := context.Background()

	t.Run("claim, complete, replay byte for byte", func(t *testing.T) {
		claim, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-1", Fingerprint: "fp"})
		if err != nil || claim.Outcome != idem.Acquired || claim.Token < 1 || claim.LeaseUntil == nil ||
			claim.Replayed {
			t.Fatalf("claim = %+v, %v", claim, err)
		}
		outcome, err := c.Complete(ctx, "refund", "K-1", claim.Token,
			json.RawMessage(`{"amount": 1e400, "id":"F-1"}`))
		if err != nil || outcome != "completed" {
			t.Fatalf("complete = %q, %v", outcome, err)
		}
		again, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-1", Fingerprint: "fp"})
		if err != nil || again.Outcome != idem.Replayed || !again.Replayed ||
			string(again.Result) != `{"amount": 1e400, "id":"F-1"}` {
			t.Fatalf("replay = %+v (result %s), %v", again, again.Result, err)
		}
		rec, err := c.GetRecord(ctx, "refund", "K-1")
		if err != nil || rec.State != "SUCCEEDED" || string(rec.Result) != `{"amount": 1e400, "id":"F-1"}` ||
			rec.Token != claim.Token || rec.Fingerprint == nil || *rec.Fingerprint != "fp" {
			t.Fatalf("record = %+v, %v", rec, err)
		}
	})

	t.Run("a live lease is ErrInProgress with Retry-After", func(t *testing.T) {
		if _, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-2", LeaseMS: 60000}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-2"})
		var p *idem.ProblemError
		if !errors.Is(err, idem.ErrInProgress) || !errors.As(err, &p) || p.Status != 409 ||
			p.Type != "urn:idem:problem:in_progress" || p.RetryAfter < time.Second ||
			p.LeaseUntil == nil || p.RequestID == "" {
			t.Fatalf("second claim: %#v", err)
		}
	})

	t.Run("fail for good, then cached_failure", func(t *testing.T) {
		claim, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-3"})
		if err != nil {
			t.Fatal(err)
		}
		outcome, err := c.Fail(ctx, "refund", "K-3", claim.Token, false, json.RawMessage(`{"code":"DECLINED"}`))
		if err != nil || outcome != "failed" {
			t.Fatalf("fail = %q, %v", outcome, err)
		}
		again, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-3"})
		if err != nil || again.Outcome != idem.CachedFailure || string(again.Error) != `{"code":"DECLINED"}` {
			t.Fatalf("claim after fail = %+v, %v", again, err)
		}
	})

	t.Run("a retryable failure releases the key", func(t *testing.T) {
		claim, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-4"})
		if err != nil {
			t.Fatal(err)
		}
		if outcome, err := c.Fail(ctx, "refund", "K-4", claim.Token, true, nil); err != nil ||
			outcome != "released" {
			t.Fatalf("fail = %q, %v", outcome, err)
		}
		next, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-4"})
		if err != nil || next.Outcome != idem.Acquired || next.Token <= claim.Token {
			t.Fatalf("claim after release = %+v, %v", next, err)
		}
		// The old token is stale now.
		_, err = c.Complete(ctx, "refund", "K-4", claim.Token, json.RawMessage(`1`))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("complete with the stale token: %v", err)
		}
	})

	t.Run("refusals are typed", func(t *testing.T) {
		_, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: "K-1", Fingerprint: "other"})
		var p *idem.ProblemError
		if !errors.Is(err, idem.ErrFingerprintMismatch) || !errors.As(err, &p) || p.Status != 422 ||
			p.Title != "Fingerprint mismatch" {
			t.Fatalf("other fingerprint: %v", err)
		}
		if _, err := c.Claim(ctx, idem.ClaimRequest{BizType: "payout", Key: "K-1"}); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("other biz_type: %v", err)
		}
		if _, err := c.GetRecord(ctx, "refund", "no/such key"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("missing record: %v", err)
		}
		// Another tenant sees none of t1's records.
		if _, err := s.client(t, s.token2).GetRecord(ctx, "refund", "K-1"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("t2 reading t1's key: %v", err)
		}
		// Checked before sending.
		if _, err := c.Claim(ctx, idem.ClaimRequest{BizType: "refund", Key: strings.Repeat("k", 256)}); !errors.Is(err, idem.ErrInvalidRequest) ||
			!strings.Contains(err.Error(), "key is 256 bytes, over the limit of 255") {
			t.Fatalf("long key: %v", err)
		}
		_, err = s.client(t, "wrong-token").GetRecord(ctx, "refund", "K-1")
		if !errors.As(err, &p) || p.Status != 401 || p.Type != "about:blank" {
			t.Fatalf("unknown token: %v", err)
		}
	})

	t.Run("records are listed page by page", func(t *testing.T) {
		var keys []string
		page, err := c.ListRecords(ctx, idem.RecordQuery{BizType: "refund", Limit: 2})
		for err == nil {
			for _, r := range page.Records {
				keys = append(keys, r.Key+":"+r.State)
			}
			if page.NextCursor == nil {
				break
			}
			page, err = c.ListRecords(ctx, idem.RecordQuery{BizType: "refund", Limit: 2, Cursor: *page.NextCursor})
		}
		want := "K-1:SUCCEEDED K-2:PROCESSING K-3:FAILED K-4:PROCESSING"
		if err != nil || strings.Join(keys, " ") != want {
			t.Fatalf("records %v, %v; want %s", keys, err, want)
		}
	})
}

// A server that is not there is ErrUnavailable after the client's attempts.
func TestClientRetriesAnUnreachableServer(t *testing.T) {
	c, err := idem.NewClient("http://127.0.0.1:1", "token")
	if err != nil {
		t.Fatal(err)
	}
	c.Retry = idem.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond}
	_, err = c.Claim(context.Background(), idem.ClaimRequest{BizType: "b", Key: "k"})
	var p *idem.ProblemError
	if !errors.Is(err, idem.ErrUnavailable) || !errors.As(err, &p) || p.Attempts != 3 || p.Status != 0 {
		t.Fatalf("claim: %v", err)
	}
}
