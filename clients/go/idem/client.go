package idem

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls the HTTP API of `idem serve` (docs/openapi.yaml). Every call answers
// a value for the outcomes a caller expects and a *ProblemError for every other
// answer (match it with errors.Is(err, ErrInProgress) and the like). Calls that met
// 502/503/504 or no answer are sent again, unchanged, with Retry's backoff: every
// call is safe to repeat (a claim is fail-closed, complete and fail with the same
// token and value answer 200 again). A Client is safe for concurrent use.
type Client struct {
	base  string
	token string
	// HTTP sends the requests; default a client with a 30 s timeout.
	HTTP *http.Client
	// Retry bounds the resends after 5xx or no answer; default DefaultRetry.
	Retry Retry
	// MaxAnswerBytes bounds an answer's body; a larger one is an error. Default 16 MiB.
	MaxAnswerBytes int64
	// RequestID makes the X-Request-Id of a call (the same for its resends);
	// default 16 random bytes in hex.
	RequestID func() string
}

// NewClient is a client of the server at baseURL ("http://127.0.0.1:7070"; a path
// prefix is kept) with a tenant's bearer token.
func NewClient(baseURL, token string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("idem: the server URL must be http://host[:port] or https://..., "+
			"got %q", baseURL)
	}
	if token == "" || strings.ContainsAny(token, "\r\n") {
		return nil, fmt.Errorf("idem: the token is empty or holds a line break")
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), token: token,
		HTTP: &http.Client{Timeout: 30 * time.Second}, Retry: DefaultRetry,
		MaxAnswerBytes: 16 << 20}, nil
}

// ClaimRequest is the body of POST /v1/claims. LeaseMS 0 is the server's default
// (30 000); WaitMS > 0 waits that long for a live holder instead of answering 409.
type ClaimRequest struct {
	BizType     string `json:"biz_type"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint,omitempty"`
	LeaseMS     int    `json:"lease_ms,omitempty"`
	WaitMS      int    `json:"wait_ms,omitempty"`
}

// Claim is a claim's answer: Acquired (201, hold Token until LeaseUntil), Replayed
// (200, Result) or CachedFailure (200, Error).
type Claim struct {
	Outcome       Outcome         `json:"outcome"`
	Token         int64           `json:"token"`
	LeaseUntil    *time.Time      `json:"lease_until"`
	Takeover      bool            `json:"takeover"`       // an expired holder's lease was taken over
	PreviousToken int64           `json:"previous_token"` // that holder's token
	Degraded      bool            `json:"degraded"`       // fail-open: nothing recorded
	ExpiresAt     *time.Time      `json:"expires_at"`
	Result        json.RawMessage `json:"result"`
	Error         json.RawMessage `json:"error"`
	// Replayed is the header Idempotent-Replayed: true (a stored answer).
	Replayed bool `json:"-"`
}

// Record is a key's record (GET /v1/records/{biz_type}/{key}); a RecordPage's
// records have no Result or Error.
type Record struct {
	BizType     string          `json:"biz_type"`
	Key         string          `json:"key"`
	State       string          `json:"state"` // PROCESSING, SUCCEEDED or FAILED
	Token       int64           `json:"token"`
	LeaseUntil  *time.Time      `json:"lease_until"`
	Fingerprint *string         `json:"fingerprint"`
	CreatedAt   *time.Time      `json:"created_at"`
	UpdatedAt   *time.Time      `json:"updated_at"`
	ExpiresAt   *time.Time      `json:"expires_at"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
}

// RecordQuery selects a page of GET /v1/records; zero fields are left out.
type RecordQuery struct {
	BizType string
	State   string
	Limit   int
	Cursor  string
}

// RecordPage is a page of records; NextCursor nil on the last page.
type RecordPage struct {
	Records    []Record `json:"records"`
	NextCursor *string  `json:"next_cursor"`
}

func checkClaimRequest(r ClaimRequest) error {
	return Request{BizType: r.BizType, Key: r.Key, Fingerprint: r.Fingerprint}.Validate()
}

// Claim claims a key (POST /v1/claims). Errors: *ProblemError matching
// ErrInProgress (409, with RetryAfter and LeaseUntil), ErrKeyReused,
// ErrFingerprintMismatch, ErrExpired, ErrInvalidRequest, ErrUnavailable (after
// the resends).
func (c *Client) Claim(ctx context.Context, r ClaimRequest) (Claim, error) {
	if err := checkClaimRequest(r); err != nil {
		return Claim{}, err
	}
	var out Claim
	body, err := json.Marshal(r)
	if err != nil {
		return Claim{}, err
	}
	h, err := c.call(ctx, http.MethodPost, "/v1/claims", body, &out,
		time.Duration(r.WaitMS)*time.Millisecond)
	if err != nil {
		return Claim{}, err
	}
	out.Replayed = h.Get("Idempotent-Replayed") == "true"
	return out, nil
}

// finishBody is the body of complete or fail, with the result or error written as
// given (encoding/json would compact a json.RawMessage: the server keeps the bytes).
func finishBody(bizType, key string, token int64, retryable *bool, member string,
	value json.RawMessage) []byte {
	head, _ := json.Marshal(struct {
		BizType   string `json:"biz_type"`
		Key       string `json:"key"`
		Token     int64  `json:"token"`
		Retryable *bool  `json:"retryable,omitempty"`
	}{bizType, key, token, retryable})
	var b bytes.Buffer
	b.Write(head[:len(head)-1])
	b.WriteString(`,"` + member + `":`)
	b.Write(value)
	b.WriteByte('}')
	return b.Bytes()
}

// rawJSON checks that v is one JSON value (nil is null).
func rawJSON(what string, v json.RawMessage) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(v) {
		return nil, invalidf("%s is not valid JSON", what)
	}
	return v, nil
}

// Complete stores result (any JSON value, kept byte for byte) under the claim's
// token (POST /v1/claims/complete) and answers "completed" (or "degraded").
// Errors: ErrLeaseLost, ErrConflict, ErrKeyReused, ErrNotFound, ErrUnavailable.
func (c *Client) Complete(ctx context.Context, bizType, key string, token int64,
	result json.RawMessage) (string, error) {
	result, err := rawJSON("result", result)
	if err != nil {
		return "", err
	}
	return c.finish(ctx, "/v1/claims/complete", bizType, key,
		finishBody(bizType, key, token, nil, "result", result))
}

// Fail reports the claim's failure (POST /v1/claims/fail): retryable releases the
// key ("released"); otherwise the error (any JSON value) is stored ("failed") and
// every later claim answers CachedFailure. Errors as for Complete.
func (c *Client) Fail(ctx context.Context, bizType, key string, token int64, retryable bool,
	errValue json.RawMessage) (string, error) {
	errValue, err := rawJSON("error", errValue)
	if err != nil {
		return "", err
	}
	return c.finish(ctx, "/v1/claims/fail", bizType, key,
		finishBody(bizType, key, token, &retryable, "error", errValue))
}

func (c *Client) finish(ctx context.Context, path, bizType, key string, body []byte) (string, error) {
	if err := (Request{BizType: bizType, Key: key}).Validate(); err != nil {
		return "", err
	}
	var out struct {
		Outcome string `json:"outcome"`
	}
	if _, err := c.call(ctx, http.MethodPost, path, body, &out, 0); err != nil {
		return "", err
	}
	return out.Outcome, nil
}

// GetRecord reads a key's record. Errors: ErrNotFound, ErrKeyReused, ErrExpired.
func (c *Client) GetRecord(ctx context.Context, bizType, key string) (Record, error) {
	if err := (Request{BizType: bizType, Key: key}).Validate(); err != nil {
		return Record{}, err
	}
	var out Record
	_, err := c.call(ctx, http.MethodGet,
		"/v1/records/"+url.PathEscape(bizType)+"/"+url.PathEscape(key), nil, &out, 0)
	return out, err
}

// ListRecords reads a page of the tenant's records, in key order.
func (c *Client) ListRecords(ctx context.Context, q RecordQuery) (RecordPage, error) {
	v := url.Values{}
	if q.BizType != "" {
		v.Set("biz_type", q.BizType)
	}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	path := "/v1/records"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out RecordPage
	_, err := c.call(ctx, http.MethodGet, path, nil, &out, 0)
	return out, err
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// call sends one API call (and its resends) and decodes a 2xx answer into out.
func (c *Client) call(ctx context.Context, method, path string, body []byte, out any,
	extra time.Duration) (http.Header, error) {
	id := newRequestID()
	if c.RequestID != nil {
		id = c.RequestID()
	}
	var header http.Header
	attempts, err := c.Retry.do(ctx, func(err error) bool {
		var p *ProblemError
		return errors.As(err, &p) && p.retryable()
	}, func() error {
		var err error
		header, err = c.send(ctx, method, path, body, id, out, extra)
		return err
	})
	var p *ProblemError
	if errors.As(err, &p) {
		p.Attempts = attempts
	}
	return header, err
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, id string, out any,
	extra time.Duration) (http.Header, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, reader)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("User-Agent", "idem-go/"+Version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	httpClient := c.HTTP
	if extra > 0 && httpClient.Timeout > 0 {
		copied := *httpClient
		copied.Timeout += extra
		httpClient = &copied
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ProblemError{Type: "about:blank", Title: "No answer",
			Detail: err.Error(), RequestID: id, cause: err}
	}
	defer resp.Body.Close()
	limit := c.MaxAnswerBytes
	if limit <= 0 {
		limit = 16 << 20
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &ProblemError{Status: resp.StatusCode, Type: "about:blank",
			Title: "No answer", Detail: "reading the answer: " + err.Error(), RequestID: id,
			cause: err}
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("idem: the answer to %s %s is larger than %d bytes", method, path,
			limit)
	}
	if answered := resp.Header.Get("X-Request-Id"); answered != "" {
		id = answered
	}
	if resp.StatusCode >= 400 {
		return nil, problemOf(resp, data, id)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("idem: the answer to %s %s (status %d) is not the expected JSON: %w",
			method, path, resp.StatusCode, err)
	}
	return resp.Header, nil
}

// problemOf reads an error answer; a body that is not a problem keeps its status.
func problemOf(resp *http.Response, data []byte, id string) *ProblemError {
	var p struct {
		Type       string     `json:"type"`
		Title      string     `json:"title"`
		Detail     string     `json:"detail"`
		Outcome    string     `json:"outcome"`
		LeaseUntil *time.Time `json:"lease_until"`
	}
	e := &ProblemError{Status: resp.StatusCode, Type: "about:blank",
		Title: http.StatusText(resp.StatusCode), RequestID: id, Body: data}
	if json.Unmarshal(data, &p) == nil && p.Type != "" {
		e.Type, e.Title, e.Detail, e.Outcome, e.LeaseUntil = p.Type, p.Title, p.Detail,
			p.Outcome, p.LeaseUntil
	} else {
		snippet := data
		if len(snippet) > 200 {
			snippet = snippet[:200]
		}
		e.Detail = strings.ToValidUTF8(string(snippet), "?")
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}
