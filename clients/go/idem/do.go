package idem

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Handler does the work of one key inside tx (the transaction that also holds the
// claim) and returns its result, any JSON value (nil is stored as null). It may run
// more than once when the store meets a transient fault (each run in a new
// transaction, the earlier one rolled back), so every effect it has must go
// through tx. An error marked with Permanent is stored as the key's final answer;
// any other error rolls everything back and leaves the key free.
type Handler func(ctx context.Context, tx *sql.Tx) (json.RawMessage, error)

// Option tunes Do and Middleware.
type Option func(*config)

type config struct {
	dialect   Dialect
	retry     Retry
	transient func(error) bool
	txOptions *sql.TxOptions
	retention time.Duration
}

func newConfig(opts []Option) config {
	c := config{retry: DefaultRetry, transient: IsTransient}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithDialect names the database's dialect instead of detecting it from the driver.
func WithDialect(d Dialect) Option { return func(c *config) { c.dialect = d } }

// WithRetry replaces DefaultRetry (attempts and backoff after transient faults).
func WithRetry(r Retry) Option { return func(c *config) { c.retry = r } }

// WithTransient replaces IsTransient, the test of which errors are retried.
func WithTransient(f func(error) bool) Option { return func(c *config) { c.transient = f } }

// WithTxOptions sets the isolation level (and read-only flag) of Do's transactions;
// the default is the database's own.
func WithTxOptions(o *sql.TxOptions) Option { return func(c *config) { c.txOptions = o } }

// WithRetention keeps a key's record for d after its first claim (then `idem
// purge` may remove it, leaving a tombstone that answers Expired); the default keeps
// it for ever. Whole seconds, rounded up.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// storeError is a store fault Do gave up on: errors.Is(err, ErrUnavailable), and
// errors.As reaches the driver's error.
type storeError struct {
	err      error
	attempts int
}

func (e *storeError) Error() string {
	return fmt.Sprintf("idem: the store failed (%d attempts): %v", e.attempts, e.err)
}
func (e *storeError) Unwrap() error        { return e.err }
func (e *storeError) Is(target error) bool { return target == ErrUnavailable }

// handlerError carries a handler's own error out of the retry loop unretried.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

// Do runs fn exactly once per key, however often the same request arrives:
//
//  1. begins a transaction and claims req's key in it through the SQL API;
//  2. acquired: runs fn in the same transaction, stores its result and commits,
//     answering Outcome Executed with the result;
//  3. finished before: answers Replayed (the stored result, byte for byte) or
//     CachedFailure (the stored error) without running fn;
//  4. another holder's lease is live: answers InProgress (a value, not an error).
//
// When fn fails with an error marked by Permanent, its transaction is rolled back
// (no business row stays) and a new one claims the key and stores the failure:
// Do answers Outcome Failed with fn's error, and every later call CachedFailure.
// Any other error of fn rolls back and is returned as is: the key stays free.
//
// Transient faults of the store (serialization failure, deadlock, a killed or
// reset connection; see IsTransient), from the claim, fn or the commit, roll back
// and start over with full-jitter backoff, up to the Retry's attempts; then the
// error matches ErrUnavailable. A commit whose answer was lost is safe to retry:
// the next claim finds the committed result and replays it.
//
// Errors: ErrInvalidRequest (a field out of range), ErrKeyReused,
// ErrFingerprintMismatch and ErrExpired (the Result says the outcome too),
// ErrUnavailable, fn's own error, ctx's error.
func Do(ctx context.Context, db *sql.DB, req Request, fn Handler, opts ...Option) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if db == nil || fn == nil {
		return Result{}, errors.New("idem: Do needs a *sql.DB and a handler")
	}
	c := newConfig(opts)
	if c.dialect == DialectAuto {
		d, err := DetectDialect(db)
		if err != nil {
			return Result{}, err
		}
		c.dialect = d
	}
	api := sqlAPI{d: c.dialect}
	var res Result
	transient := func(err error) bool {
		var h *handlerError
		return !errors.As(err, &h) && c.transient(err)
	}
	attempts, err := c.retry.do(ctx, transient, func() error {
		var err error
		res, err = runOnce(ctx, db, api, c, req, fn)
		return err
	})
	res.Attempts = attempts
	var h *handlerError
	if errors.As(err, &h) {
		if !IsPermanent(h.err) {
			return Result{Attempts: attempts}, h.err
		}
		return storeFailure(ctx, db, api, c, req, h.err, attempts)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return Result{Attempts: attempts}, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if c.transient(err) {
			return Result{Attempts: attempts}, &storeError{err: err, attempts: attempts}
		}
		return Result{Attempts: attempts}, err
	}
	return res, outcomeError(res.Outcome)
}

// outcomeError is the error Do returns beside a claim outcome that refuses the request.
func outcomeError(o Outcome) error {
	switch o {
	case KeyReused, FingerprintMismatch, Expired:
		return outcomeErrors[string(o)]
	}
	return nil
}

// runOnce is one attempt: claim, fn, complete, commit in one transaction.
func runOnce(ctx context.Context, db *sql.DB, api sqlAPI, c config, req Request,
	fn Handler) (Result, error) {
	tx, err := db.BeginTx(ctx, c.txOptions)
	if err != nil {
		return Result{}, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	claim, err := api.claim(ctx, tx, req, c.retention)
	if err != nil {
		return Result{}, err
	}
	if claim.Outcome != Acquired {
		return claim, tx.Rollback()
	}
	out, err := fn(ctx, tx)
	if err != nil {
		_ = tx.Rollback()
		if c.transient(err) && !IsPermanent(err) {
			return Result{}, err // a store fault inside fn: start over
		}
		return Result{}, &handlerError{err: err}
	}
	if out == nil {
		out = json.RawMessage("null")
	}
	if !json.Valid(out) {
		_ = tx.Rollback()
		return Result{}, &handlerError{err: invalidf("the handler's result is not valid JSON")}
	}
	if err := api.complete(ctx, tx, req, out); err != nil {
		return Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return Result{}, err
	}
	return Result{Outcome: Executed, Result: out, Token: claim.Token, ExpiresAt: claim.ExpiresAt,
		Takeover: claim.Takeover}, nil
}

// storeFailure records fn's permanent error, its business work already rolled
// back: a new transaction claims the key again and fails it for good. A duplicate
// that finished the key in between wins; its answer is returned.
func storeFailure(ctx context.Context, db *sql.DB, api sqlAPI, c config, req Request,
	cause error, before int) (Result, error) {
	failure := FailureJSON(cause)
	var res Result
	attempts, err := c.retry.do(ctx, c.transient, func() error {
		tx, err := db.BeginTx(ctx, c.txOptions)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
		claim, err := api.claim(ctx, tx, req, c.retention)
		if err != nil {
			return err
		}
		if claim.Outcome != Acquired {
			res = claim
			return tx.Rollback()
		}
		if err := api.fail(ctx, tx, req, false, failure); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		res = Result{Outcome: Failed, Error: failure, Token: claim.Token, ExpiresAt: claim.ExpiresAt}
		return nil
	})
	res.Attempts = before + attempts
	if err != nil {
		if c.transient(err) {
			err = &storeError{err: err, attempts: attempts}
		}
		return Result{Attempts: res.Attempts}, fmt.Errorf(
			"idem: the handler failed permanently (%v) and the failure could not be stored: %w",
			cause, err)
	}
	// Our own failure, committed by an attempt whose answer was lost.
	if res.Outcome == CachedFailure && bytes.Equal(res.Error, failure) {
		res.Outcome = Failed
	}
	if res.Outcome == Failed {
		return res, cause
	}
	return res, outcomeError(res.Outcome)
}
