package idem

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MiddlewareOptions tunes Middleware. The zero value works: biz_type "http", POST
// and PATCH need a key, 1 MiB bounds.
type MiddlewareOptions struct {
	BizType string   // every key's biz_type; default "http"
	Tenant  string   // the tenant of every key; default the SQL API's ("default")
	Methods []string // methods that need an Idempotency-Key; default POST, PATCH
	// OptionalPrefixes: paths under these prefixes pass through when they carry no key.
	OptionalPrefixes []string
	// ClientHeader, when set, keeps keys per client: the digest of this request
	// header's value is the tenant (a request without it is 400). Without it keys are
	// global: a client sending another's key gets the other's stored answer.
	ClientHeader string
	// CanonicalJSON fingerprints a JSON body by its RFC 8785 form, as idem proxy
	// --fingerprint json does, so the same value with other spacing, member order or
	// number spelling (12.50, 12.5) is the same request. A body that is not JSON, or
	// that RFC 8785 leaves out (a member name given twice), is fingerprinted by its bytes.
	CanonicalJSON    bool
	MaxBodyBytes     int64 // request bodies larger than this are 413; default 1 MiB
	MaxResponseBytes int64 // answers larger than this are not stored (500); default 1 MiB
	KeepSetCookie    bool  // store Set-Cookie too (default: passed on once, never replayed)
	// Options: the dialect, retries and transaction options of the claims (as for Do).
	Options []Option
	// Logf receives what the client is not told (a store fault); default log.Printf.
	Logf func(format string, args ...any)
}

const defaultMaxBytes = 1 << 20

type txContextKey struct{}

// TxFromContext is the transaction that holds the key's claim, for a handler under
// Middleware: work done through it commits with the stored answer or not at all.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txContextKey{}).(*sql.Tx)
	return tx, ok
}

// Middleware gives next Idempotency-Key semantics (as `idem proxy` does) through the
// SQL API of db. A request with a method of opts.Methods needs the header
// Idempotency-Key (a token or an RFC 8941 string, 1-255 bytes); its first answer
// (status, headers, body) is stored with the claim, in the transaction that
// TxFromContext gives the handler, and replayed to every retry with the header
// Idempotent-Replayed: true. Answers 2xx and 4xx (but 408, 425 and 429) are stored;
// any other rolls back and leaves the key free. Refusals are application/problem+json
// as idem proxy words them: 400 (missing or invalid key), 409 in_progress, 410
// expired, 413 (body over MaxBodyBytes), 422 fingerprint_mismatch (the key was used
// for another method, target or body), 503 store_unavailable. A duplicate that
// arrives while the first is running waits for it (the claim's row lock) and is
// then answered the stored answer (after the SQL API's lock timeout, 2 s, it is
// answered 409 in_progress instead).
func Middleware(db *sql.DB, opts MiddlewareOptions) func(http.Handler) http.Handler {
	m := &middleware{db: db, o: opts, methods: map[string]bool{}}
	if m.o.BizType == "" {
		m.o.BizType = "http"
	}
	if len(m.o.Methods) == 0 {
		m.o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, method := range m.o.Methods {
		m.methods[strings.ToUpper(method)] = true
	}
	if m.o.MaxBodyBytes <= 0 {
		m.o.MaxBodyBytes = defaultMaxBytes
	}
	if m.o.MaxResponseBytes <= 0 {
		m.o.MaxResponseBytes = defaultMaxBytes
	}
	if m.o.Logf == nil {
		m.o.Logf = log.Printf
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

type middleware struct {
	db      *sql.DB
	o       MiddlewareOptions
	methods map[string]bool
}

// requestID is the request's X-Request-Id when it is 1-128 of [A-Za-z0-9._:-] (as
// idem serve takes it), else a new one.
func requestID(r *http.Request) string {
	id := r.Header.Get("X-Request-Id")
	ok := id != "" && len(id) <= 128
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("._:-", c) >= 0
	}
	if ok {
		return id
	}
	return newRequestID()
}

// writeProblem writes an RFC 9457 body shaped as idem serve and idem proxy write
// theirs, the request's id in X-Request-Id and as request_id.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, slug, title, detail,
	outcome string) {
	type body struct {
		Type      string `json:"type"`
		Title     string `json:"title"`
		Status    int    `json:"status"`
		Detail    string `json:"detail"`
		Outcome   string `json:"outcome,omitempty"`
		RequestID string `json:"request_id"`
	}
	typ := "about:blank"
	if slug != "" {
		typ = "urn:idem:problem:" + slug
	}
	if title == "" {
		title = http.StatusText(status)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as idem writes it: '&' stays '&'
	id := requestID(r)
	_ = enc.Encode(body{Type: typ, Title: title, Status: status, Detail: detail, Outcome: outcome,
		RequestID: id})
	b.Truncate(b.Len() - 1) // Encode's newline
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Request-Id", id)
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// ParseIdempotencyKey reads an Idempotency-Key header value as idem proxy does: an
// RFC 8941 string ("..." of printable ASCII, \" and \\ escaped) or a bare token of
// letters, digits and !#$%&'*+-.^_`|~:/; parameters after ';' are ignored. The
// key must then be 1-255 bytes.
func ParseIdempotencyKey(value string) (string, error) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return "", invalidf("the Idempotency-Key header is empty")
	}
	var key strings.Builder
	if v[0] == '"' {
		i := 1
		for ; i < len(v) && v[i] != '"'; i++ {
			c := v[i]
			if c == '\\' {
				if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
					return "", invalidf(
						"the Idempotency-Key string has a '\\' not followed by '\"' or '\\'")
				}
				i++
				c = v[i]
			} else if c < 0x20 || c > 0x7E {
				return "", invalidf("the Idempotency-Key string may hold only printable ASCII")
			}
			key.WriteByte(c)
		}
		if i >= len(v) {
			return "", invalidf("the Idempotency-Key string is unclosed")
		}
		if rest := v[i+1:]; rest != "" && rest[0] != ';' {
			return "", invalidf("the Idempotency-Key has text after its closing quote")
		}
	} else {
		token := v
		if j := strings.IndexByte(v, ';'); j >= 0 {
			token = v[:j]
		}
		for i := 0; i < len(token); i++ {
			if !isTokenChar(token[i]) {
				return "", invalidf("%s", "the Idempotency-Key must be a quoted string "+
					"(\"...\") or a token of letters, digits and !#$%&'*+-.^_`|~:/")
			}
		}
		key.WriteString(token)
	}
	if key.Len() == 0 {
		return "", invalidf("the Idempotency-Key is empty")
	}
	if p := nameProblem("key", key.String(), MaxKeyBytes); p != "" {
		return "", invalidf("%s", p)
	}
	return key.String(), nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// detail is an error's message without the package's "idem: invalid_request: " prefix.
func detail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalidRequest.Error()+": ")
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods[r.Method] {
		next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values("Idempotency-Key")
	if len(values) > 1 {
		writeProblem(w, r, 400, "invalid_idempotency_key", "Bad Request",
			"the Idempotency-Key header is given more than once", "")
		return
	}
	if len(values) == 0 {
		for _, prefix := range m.o.OptionalPrefixes {
			if strings.HasPrefix(r.URL.Path, prefix) {
				next.ServeHTTP(w, r)
				return
			}
		}
		writeProblem(w, r, 400, "missing_idempotency_key", "Bad Request", r.Method+
			" needs an Idempotency-Key header here (a unique value per operation, the same on "+
			"every retry)", "")
		return
	}
	key, err := ParseIdempotencyKey(values[0])
	if err != nil {
		writeProblem(w, r, 400, "invalid_idempotency_key", "Bad Request", detail(err), "")
		return
	}
	req := Request{BizType: m.o.BizType, Key: key, Tenant: m.o.Tenant}
	if m.o.ClientHeader != "" {
		clients := r.Header.Values(m.o.ClientHeader)
		if len(clients) == 0 {
			writeProblem(w, r, 400, "missing_client_identity", "Bad Request",
				"keys are kept per client here, and the request has no "+m.o.ClientHeader+
					" header", "")
			return
		}
		if len(clients) > 1 {
			writeProblem(w, r, 400, "ambiguous_client_identity", "Bad Request",
				"keys are kept per client here, and the "+m.o.ClientHeader+
					" header is given more than once; send it once", "")
			return
		}
		req.Tenant = "client-" + Fingerprint([]byte(clients[0]))[:32]
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.o.MaxBodyBytes+1))
	if err != nil {
		writeProblem(w, r, 400, "bad_http", "Malformed HTTP request",
			"the request body could not be read", "")
		return
	}
	if int64(len(body)) > m.o.MaxBodyBytes {
		writeProblem(w, r, 413, "", "Content Too Large", fmt.Sprintf("the request body is larger than %d bytes",
			m.o.MaxBodyBytes), "")
		return
	}
	req.Fingerprint = m.fingerprint(r, body)

	var live *recorder
	res, err := Do(r.Context(), m.db, req, func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) {
		live = newRecorder(m.o.MaxResponseBytes)
		inner := r.Clone(context.WithValue(ctx, txContextKey{}, tx))
		inner.Body = io.NopCloser(bytes.NewReader(body))
		inner.ContentLength = int64(len(body))
		next.ServeHTTP(live, inner)
		if live.overflow {
			return nil, errAnswerTooLarge
		}
		if !storable(live.status) {
			return nil, errNotStored
		}
		return live.encode(m.o.KeepSetCookie), nil
	}, m.o.Options...)
	switch {
	case errors.Is(err, errNotStored):
		live.sendTo(w)
	case errors.Is(err, errAnswerTooLarge):
		writeProblem(w, r, 500, "answer_too_large", "", fmt.Sprintf("the answer is larger than "+
			"%d bytes, the most that is stored for a key; nothing was kept", m.o.MaxResponseBytes), "")
	case res.Outcome == Executed:
		live.sendTo(w)
	case res.Outcome == Replayed || res.Outcome == CachedFailure:
		m.replay(w, r, res)
	case res.Outcome == InProgress:
		w.Header().Set("Retry-After", retryAfter(res.LeaseUntil))
		writeProblem(w, r, 409, "in_progress", "Conflict",
			"a request with this Idempotency-Key is still being processed", "in_progress")
	case res.Outcome == FingerprintMismatch || res.Outcome == KeyReused:
		writeProblem(w, r, 422, "fingerprint_mismatch", "Fingerprint mismatch",
			"this Idempotency-Key was used for another request (the method, target or body "+
				"differ)", "fingerprint_mismatch")
	case res.Outcome == Expired:
		writeProblem(w, r, 410, "expired", "Expired", "the answer stored for this Idempotency-Key "+
			"was purged after its retention; a request this late is not sent again", "expired")
	case errors.Is(err, ErrInvalidRequest):
		writeProblem(w, r, 400, "invalid_idempotency_key", "Bad Request", detail(err), "")
	case r.Context().Err() != nil:
		// The client went away; no answer is read.
	default:
		m.o.Logf("idem: %s %s: store unavailable, the handler's work was not kept: %v",
			r.Method, r.URL.Path, err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, r, 503, "store_unavailable", "Store unavailable",
			"store unavailable; nothing was kept, retry later", "")
	}
}

// retryAfter is the whole seconds until a lease ends, at least 1.
func retryAfter(until *time.Time) string {
	seconds := int64(1)
	if until != nil {
		if left := int64(math.Ceil(time.Until(*until).Seconds())); left > seconds {
			seconds = left
		}
	}
	return strconv.FormatInt(seconds, 10)
}

var (
	errNotStored      = errors.New("idem: the answer is not final for the key")
	errAnswerTooLarge = errors.New("idem: the answer is too large to store")
)

// storable: an answer final for the key, as idem proxy decides (2xx, and 4xx but
// those that ask for a retry).
func storable(status int) bool {
	return status >= 200 && status < 300 ||
		status >= 400 && status < 500 && status != 408 && status != 425 && status != 429
}

func (m *middleware) fingerprint(r *http.Request, body []byte) string {
	digest := bodyDigest(body, m.o.CanonicalJSON)
	target := r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	return Fingerprint([]byte(r.Method + "\n" + target + "\n" + digest))
}

// bodyDigest is the digest of a request body in a fingerprint, as idem proxy makes it:
// with canonicalJSON, "jcs:" and the Fingerprint of its RFC 8785 form (rfc8785JSON)
// when it has one, else the Fingerprint of its bytes.
func bodyDigest(body []byte, canonicalJSON bool) string {
	if canonicalJSON {
		if c, err := rfc8785JSON(body); err == nil {
			return "jcs:" + Fingerprint(c)
		}
	}
	return Fingerprint(body)
}

// storedAnswer is the form idem proxy stores an answer in, so either replays the other's.
type storedAnswer struct {
	Status     int         `json:"status"`
	Headers    [][2]string `json:"headers"`
	BodyBase64 string      `json:"body_base64"`
}

func (m *middleware) replay(w http.ResponseWriter, r *http.Request, res Result) {
	stored := []byte(res.Result)
	if res.Outcome == CachedFailure {
		stored = []byte(res.Error)
	}
	var a storedAnswer
	body, err := []byte(nil), json.Unmarshal(stored, &a)
	if err == nil {
		body, err = base64.StdEncoding.DecodeString(a.BodyBase64)
	}
	if err != nil || a.Status < 100 || a.Status > 999 {
		m.o.Logf("idem: a key's record is not an answer this middleware can replay: %v", err)
		writeProblem(w, r, 500, "internal", "Internal error",
			"the stored answer cannot be replayed; see the log", "")
		return
	}
	h := w.Header()
	for _, kv := range a.Headers {
		h.Add(kv[0], kv[1])
	}
	h.Set("Idempotent-Replayed", "true")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(a.Status)
	_, _ = w.Write(body)
}

// recorder captures a handler's answer, its body bounded.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int64
	overflow bool
}

func newRecorder(limit int64) *recorder { return &recorder{header: http.Header{}, limit: limit} }

func (c *recorder) Header() http.Header { return c.header }

func (c *recorder) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *recorder) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if int64(c.body.Len()+len(b)) > c.limit {
		c.overflow = true
		return 0, errAnswerTooLarge
	}
	return c.body.Write(b)
}

var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Content-Length": true}

// encode is the answer in the stored form, hop-by-hop headers (and Set-Cookie
// unless kept) left out, headers in name order.
func (c *recorder) encode(keepSetCookie bool) json.RawMessage {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	names := make([]string, 0, len(c.header))
	for name := range c.header {
		names = append(names, name)
	}
	sort.Strings(names)
	a := storedAnswer{Status: c.status, Headers: [][2]string{},
		BodyBase64: base64.StdEncoding.EncodeToString(c.body.Bytes())}
	for _, name := range names {
		canonical := http.CanonicalHeaderKey(name)
		if hopByHop[canonical] || (!keepSetCookie && canonical == "Set-Cookie") {
			continue
		}
		for _, v := range c.header[name] {
			a.Headers = append(a.Headers, [2]string{name, v})
		}
	}
	b, _ := json.Marshal(a)
	return b
}

// sendTo writes the captured answer, every header included, to w.
func (c *recorder) sendTo(w http.ResponseWriter) {
	for name, values := range c.header {
		if http.CanonicalHeaderKey(name) == "Content-Length" {
			continue
		}
		w.Header()[name] = values
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	w.Header().Set("Content-Length", strconv.Itoa(c.body.Len()))
	w.WriteHeader(c.status)
	_, _ = w.Write(c.body.Bytes())
}
