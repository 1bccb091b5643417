package idem

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors a caller tests with errors.Is, from Do, Middleware's store and Client
// alike. Each names a guard outcome; a *ProblemError from Client matches the one
// of its outcome (errors.Is(err, ErrInProgress)).
var (
	// ErrKeyReused: the key belongs to another biz_type. Do not retry.
	ErrKeyReused = errors.New("idem: key_reused: the key belongs to another biz_type")
	// ErrFingerprintMismatch: the key was first used with another request. Do not retry.
	ErrFingerprintMismatch = errors.New(
		"idem: fingerprint_mismatch: the key was first used with another request")
	// ErrExpired: the key's record was purged after its retention; a request this
	// late is not run again.
	ErrExpired = errors.New("idem: expired: the key's record was purged after its retention")
	// ErrInProgress: another holder's lease on the key is live (Client only: Do
	// answers it as Result.Outcome).
	ErrInProgress = errors.New("idem: in_progress: another holder's lease on the key is live")
	// ErrLeaseLost: the token is not the current holder's (taken over or released).
	ErrLeaseLost = errors.New("idem: lease_lost: the token is not the current holder's")
	// ErrConflict: the claim already ended with other content.
	ErrConflict = errors.New("idem: conflict: the claim already ended with other content")
	// ErrNotFound: no record of the key (in the caller's tenant).
	ErrNotFound = errors.New("idem: not_found: no record of the key")
	// ErrUnavailable: the store could not be reached or kept failing transiently;
	// nothing was recorded. Retry the same call later.
	ErrUnavailable = errors.New("idem: unavailable: the store could not be reached")
	// ErrInvalidRequest: a value of the request is out of range (named in the error).
	ErrInvalidRequest = errors.New("idem: invalid_request")
)

// outcomeErrors maps an outcome (or a problem slug) to its sentinel.
var outcomeErrors = map[string]error{
	"key_reused":           ErrKeyReused,
	"fingerprint_mismatch": ErrFingerprintMismatch,
	"expired":              ErrExpired,
	"in_progress":          ErrInProgress,
	"lease_lost":           ErrLeaseLost,
	"conflict":             ErrConflict,
	"not_found":            ErrNotFound,
	"unavailable":          ErrUnavailable,
	"store_unavailable":    ErrUnavailable,
	"invalid_request":      ErrInvalidRequest,
}

// invalidf is an ErrInvalidRequest naming what was wrong.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// permanentError marks a handler's error as final for its key.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent marks err as a final failure of the handler: Do stores it (the key
// answers cached_failure with err's text from then on) instead of leaving the key
// free for a retry. Use it for a request that can never succeed (a refund of an
// unknown order), not for a fault that may pass (a timeout). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) was marked by Permanent
// or has a method `Permanent() bool` that returns true.
func IsPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var marked interface{ Permanent() bool }
	return errors.As(err, &marked) && marked.Permanent()
}

// FailureJSON is the error Do stores for a permanent failure: the JSON of an error
// with a method `FailureJSON() json.RawMessage` (valid JSON) in err's chain, else
// {"error": err.Error()}.
func FailureJSON(err error) json.RawMessage {
	var custom interface{ FailureJSON() json.RawMessage }
	if errors.As(err, &custom) {
		if b := custom.FailureJSON(); json.Valid(b) {
			return b
		}
	}
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{err.Error()})
	return b
}

// ProblemError is an error answer of `idem serve` (application/problem+json,
// RFC 9457), or no answer at all (Status 0: the connection failed).
type ProblemError struct {
	Status    int    // the HTTP status; 0 when no answer arrived
	Type      string // "urn:idem:problem:<slug>" or "about:blank"
	Title     string
	Detail    string
	Outcome   string // the guard outcome the answer reports ("in_progress", ...), or ""
	RequestID string // the answer's X-Request-Id, else the one the client sent
	// RetryAfter is the answer's Retry-After (in_progress, 503), 0 when absent.
	RetryAfter time.Duration
	// LeaseUntil is the live holder's lease end of an in_progress answer.
	LeaseUntil *time.Time
	// Body is the problem body as received (at most the client's body limit).
	Body []byte
	// Attempts is how many times the call was sent.
	Attempts int
	cause    error // the transport error when Status is 0
}

// Slug is the idem problem name ("lease_lost") of Type, or "" for about:blank.
func (e *ProblemError) Slug() string {
	return strings.TrimPrefix(e.Type, "urn:idem:problem:")
}

func (e *ProblemError) Error() string {
	var b strings.Builder
	b.WriteString("idem: ")
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	name := e.Outcome
	if name == "" && strings.HasPrefix(e.Type, "urn:idem:problem:") {
		name = e.Slug()
	}
	if name == "" {
		name = e.Title
	}
	if name != "" {
		b.WriteString(name)
		b.WriteString(": ")
	}
	b.WriteString(e.Detail)
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", e.RequestID)
	}
	return b.String()
}

// Unwrap gives the transport error of a call that got no answer.
func (e *ProblemError) Unwrap() error { return e.cause }

// Is matches the sentinel of the answer's outcome (else of its problem slug);
// 5xx answers and failed connections match ErrUnavailable.
func (e *ProblemError) Is(target error) bool {
	if s, ok := outcomeErrors[e.Outcome]; ok && s == target {
		return true
	}
	if s, ok := outcomeErrors[e.Slug()]; ok && s == target {
		return true
	}
	return target == ErrUnavailable && e.retryable()
}

// retryable: the same call may be sent again unchanged (nothing ran).
func (e *ProblemError) retryable() bool {
	return e.Status == 0 || e.Status == 502 || e.Status == 503 || e.Status == 504
}
