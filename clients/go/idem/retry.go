package idem

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"math/rand"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Retry bounds how often a call that met a transient fault is made again, and how
// long to wait in between: full-jitter exponential backoff, a random delay in
// [0, min(MaxDelay, BaseDelay·2^(n-1))) before the n-th retry.
type Retry struct {
	MaxAttempts int           // attempts in all, the first included; < 1 means 1
	BaseDelay   time.Duration // the cap of the first retry's delay
	MaxDelay    time.Duration // the cap of every delay
}

// DefaultRetry: 8 attempts, delays capped at 10 ms, 20 ms, ... up to 1 s.
var DefaultRetry = Retry{MaxAttempts: 8, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second}

var (
	jitterMu   sync.Mutex
	jitterRand = rand.New(rand.NewSource(time.Now().UnixNano()))
)

// Delay is the wait before retry n (n >= 1): full jitter under the exponential cap.
func (r Retry) Delay(n int) time.Duration {
	if r.BaseDelay <= 0 || n < 1 {
		return 0
	}
	limit := r.BaseDelay
	for i := 1; i < n && (r.MaxDelay <= 0 || limit < r.MaxDelay); i++ {
		limit *= 2
	}
	if r.MaxDelay > 0 && limit > r.MaxDelay {
		limit = r.MaxDelay
	}
	jitterMu.Lock()
	defer jitterMu.Unlock()
	return time.Duration(jitterRand.Int63n(int64(limit)))
}

// sleep waits d or until ctx ends (its error then).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// do runs call until it succeeds, fails with an error transient does not accept,
// runs out of attempts or ctx ends. It returns call's last error and the attempts made.
func (r Retry) do(ctx context.Context, transient func(error) bool, call func() error) (int, error) {
	attempts := r.MaxAttempts
	if attempts < 1 {
		attempts = 1
	}
	var err error
	for n := 1; ; n++ {
		if err = call(); err == nil || !transient(err) || n >= attempts {
			return n, err
		}
		if serr := sleep(ctx, r.Delay(n)); serr != nil {
			return n, err
		}
	}
}

// Transient SQLSTATEs: serialization failure, deadlock, connection exceptions
// (class 08), operator intervention (class 57: pg_terminate_backend, shutdown) but
// a cancelled statement (57014: the caller's context or statement_timeout).
func transientSQLState(state string) bool {
	return state == "40001" || state == "40P01" || strings.HasPrefix(state, "08") ||
		(strings.HasPrefix(state, "57") && state != "57014")
}

// Transient MySQL/MariaDB error numbers: deadlock, lock wait timeout, connection
// killed (MariaDB), server shutdown, server gone or lost, query interrupted.
var transientMySQLErrors = map[int]bool{
	1213: true, 1205: true, 1927: true, 1053: true, 2006: true, 2013: true, 1317: true,
	1040: true,
}

// IsTransient reports whether err is a fault of the store that may pass on its own
// and after which nothing was committed by the failed attempt: a serialization
// failure (SQLSTATE 40001), a deadlock (40P01, MySQL 1213), a lock wait timeout
// (1205), a killed or reset connection. Drivers are recognised without importing
// them: an error with a SQLState() method (lib/pq, pgx), or a struct with a
// numeric Number field (go-sql-driver/mysql's *MySQLError).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	if state := sqlState(err); state != "" {
		return transientSQLState(state)
	}
	if n, ok := mysqlErrorNumber(err); ok {
		return transientMySQLErrors[n]
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// Drivers that report a lost connection only in words (go-sql-driver/mysql's
	// ErrInvalidConn, "sql: connection is already closed", lib/pq 1.10's protocol
	// error when the server ends a session in the middle of an answer).
	msg := err.Error()
	for _, s := range []string{"invalid connection", "bad connection", "connection reset",
		"broken pipe", "connection is already closed", "server closed the connection",
		"pq: unexpected message"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// sqlState is the SQLSTATE of a driver error in err's chain, "" when unknown: from a
// SQLState() method (lib/pq, pgx), a SQLState [5]byte field (go-sql-driver/mysql
// 1.7+), or, for go-sql-driver/mysql versions that drop it, from what the SQL API's
// SIGNALs (MySQL error 1644) say.
func sqlState(err error) string {
	if err == nil {
		return ""
	}
	var stated interface{ SQLState() string }
	if errors.As(err, &stated) {
		return stated.SQLState()
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			if f := v.FieldByName("SQLState"); f.IsValid() && f.Kind() == reflect.Array &&
				f.Len() == 5 && f.Type().Elem().Kind() == reflect.Uint8 {
				b := make([]byte, 5)
				reflect.Copy(reflect.ValueOf(b), f)
				if b[0] != 0 {
					return string(b)
				}
			}
		}
	}
	if n, ok := mysqlErrorNumber(err); ok && n == 1644 {
		msg := err.Error()
		for _, m := range []struct{ text, state string }{
			{"idem: not_found:", "IDM01"}, {"idem: key_reused:", "IDM02"},
			{"idem: lease_lost:", "IDM03"}, {"idem: already_finished:", "IDM04"},
			{"idem: the record of the key vanished", "40001"}, {"idem: ", "22023"},
		} {
			if strings.Contains(msg, m.text) {
				return m.state
			}
		}
	}
	return ""
}

// mysqlErrorNumber finds a driver error struct with an unsigned `Number` field
// (go-sql-driver/mysql) in err's chain, else parses "Error 1213..." text.
func mysqlErrorNumber(err error) (int, bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct && strings.Contains(v.Type().PkgPath(), "mysql") {
			if f := v.FieldByName("Number"); f.IsValid() && f.CanUint() {
				return int(f.Uint()), true
			}
		}
	}
	msg := err.Error()
	if i := strings.Index(msg, "Error "); i >= 0 {
		digits := msg[i+6:]
		j := 0
		for j < len(digits) && j < 5 && digits[j] >= '0' && digits[j] <= '9' {
			j++
		}
		if n, convErr := strconv.Atoi(digits[:j]); convErr == nil && j >= 4 {
			return n, true
		}
	}
	return 0, false
}
