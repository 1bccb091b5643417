package idem

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Dialect is the SQL flavour of the database Do and Middleware talk to.
type Dialect int

const (
	// DialectAuto detects the dialect from the *sql.DB's driver.
	DialectAuto Dialect = iota
	// Postgres: the functions idem.claim_v1, idem.complete_v1, idem.fail_v1, $n placeholders.
	Postgres
	// MySQL (and MariaDB): the procedures idem_sql_claim_v1, ... called with CALL, ? placeholders.
	MySQL
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return "auto"
}

// DetectDialect names the dialect of db's driver: lib/pq and pgx's stdlib are
// Postgres, go-sql-driver/mysql is MySQL. Another driver is an error; pass its
// dialect with WithDialect.
func DetectDialect(db *sql.DB) (Dialect, error) {
	t := reflect.TypeOf(db.Driver())
	name := t.String()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	path := t.PkgPath()
	switch {
	case strings.Contains(path, "lib/pq"), strings.Contains(path, "jackc/pgx"):
		return Postgres, nil
	case strings.Contains(path, "go-sql-driver/mysql"):
		return MySQL, nil
	}
	return DialectAuto, fmt.Errorf("idem: cannot tell the SQL dialect of the driver %s; "+
		"pass idem.WithDialect(idem.Postgres) or idem.WithDialect(idem.MySQL)", name)
}

// Outcome is what a claim found, or what Do did.
type Outcome string

// The outcomes of the SQL API's claim, and the two that Do adds.
const (
	Acquired            Outcome = "acquired"             // the caller holds the key (SQL API only)
	Replayed            Outcome = "replayed"             // finished before: Result holds its result
	InProgress          Outcome = "in_progress"          // another holder's lease is live
	KeyReused           Outcome = "key_reused"           // the key belongs to another biz_type
	FingerprintMismatch Outcome = "fingerprint_mismatch" // the key was used with another request
	CachedFailure       Outcome = "cached_failure"       // failed before, for good: Result.Error
	Expired             Outcome = "expired"              // purged after its retention
	// Executed: Do ran the handler, and its result committed with the claim.
	Executed Outcome = "executed"
	// Failed: Do ran the handler, it failed permanently, and the failure is now stored.
	Failed Outcome = "failed"
)

// Result is what Do answers for a key.
type Result struct {
	Outcome Outcome
	// Result is the handler's result (Executed) or the stored one (Replayed),
	// byte for byte; nil otherwise.
	Result json.RawMessage
	// Error is the stored error (JSON) of a Failed or CachedFailure key.
	Error json.RawMessage
	// Token is the record's fencing token (InProgress: the holder's).
	Token int64
	// ExpiresAt is when the key's record may be purged; nil: kept for ever.
	ExpiresAt *time.Time
	// LeaseUntil is when the claim's lease ends (Acquired, InProgress), else nil.
	LeaseUntil *time.Time
	// Takeover: an earlier holder's lease had expired and was taken over.
	Takeover bool
	// Attempts counts the transactions Do began (more than 1 after transient faults).
	Attempts int
}

// Request names one operation: its key within a biz_type and tenant, and the
// fingerprint of its payload (a retry must carry the same one; "" for none).
type Request struct {
	BizType     string
	Key         string
	Fingerprint string
	Tenant      string // "" is the SQL API's default tenant, "default"
}

// The bounds the store checks (and Do checks first, naming the field).
const (
	MaxKeyBytes         = 255
	MaxBizTypeBytes     = 255
	MaxTenantBytes      = 255
	MaxFingerprintBytes = 1024
)

// nameProblem says what is wrong with a biz_type, key or tenant, "" when nothing.
func nameProblem(what, v string, max int) string {
	switch {
	case v == "":
		return what + " is empty"
	case len(v) > max:
		return fmt.Sprintf("%s is %d bytes, over the limit of %d", what, len(v), max)
	case !utf8.ValidString(v):
		return what + " is not UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Sprintf("%s holds a NUL byte at byte %d", what, strings.IndexByte(v, 0))
	}
	return ""
}

func checkName(what, v string, max int) error {
	if p := nameProblem(what, v, max); p != "" {
		return invalidf("%s", p)
	}
	return nil
}

// Validate checks the request's fields against the store's bounds.
func (r Request) Validate() error {
	if err := checkName("biz_type", r.BizType, MaxBizTypeBytes); err != nil {
		return err
	}
	if err := checkName("key", r.Key, MaxKeyBytes); err != nil {
		return err
	}
	if r.Tenant != "" {
		if err := checkName("tenant", r.Tenant, MaxTenantBytes); err != nil {
			return err
		}
	}
	if len(r.Fingerprint) > MaxFingerprintBytes {
		return invalidf("fingerprint is %d bytes, over the limit of %d", len(r.Fingerprint),
			MaxFingerprintBytes)
	}
	return nil
}

func (r Request) tenant() string {
	if r.Tenant == "" {
		return "default"
	}
	return r.Tenant
}

// nullable is v as a SQL argument, NULL when empty.
func nullable(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// sqlAPI is the SQL API of one dialect.
type sqlAPI struct{ d Dialect }

// call runs one function or procedure of the API and reads its one row.
func (a sqlAPI) call(ctx context.Context, tx *sql.Tx, name string, args ...any) (Result, error) {
	var q string
	if a.d == Postgres {
		ph := make([]string, len(args))
		for i := range args {
			ph[i] = "$" + strconv.Itoa(i+1)
		}
		q = "SELECT * FROM idem." + name + "(" + strings.Join(ph, ", ") + ")"
		if name == "claim_v1" {
			q = strings.Replace(q, "$5)", "$5::interval)", 1)
		}
	} else {
		q = "CALL idem_sql_" + name + "(" + strings.TrimSuffix(strings.Repeat("?, ", len(args)), ", ") + ")"
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return Result{}, apiError(err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return Result{}, apiError(err)
		}
		return Result{}, fmt.Errorf("idem: %s returned no row", name)
	}
	res, err := scanAPIRow(rows, name)
	if err != nil {
		return Result{}, err
	}
	// A CALL answers its rows and then a status; read it so the connection is free.
	for rows.Next() {
	}
	for rows.NextResultSet() {
		for rows.Next() {
		}
	}
	return res, apiError(rows.Err())
}

// The SQLSTATEs the SQL API raises, and the errors they are.
var apiStates = map[string]error{
	"22023": ErrInvalidRequest,
	"IDM01": ErrNotFound,
	"IDM02": ErrKeyReused,
	"IDM03": ErrLeaseLost,
	"IDM04": ErrConflict,
}

// apiError makes an error the SQL API raised match its sentinel (errors.Is) while
// errors.As still reaches the driver's error.
func apiError(err error) error {
	if s, ok := apiStates[sqlState(err)]; ok {
		return &sqlAPIError{err: err, sentinel: s}
	}
	return err
}

type sqlAPIError struct{ err, sentinel error }

func (e *sqlAPIError) Error() string        { return e.err.Error() }
func (e *sqlAPIError) Unwrap() error        { return e.err }
func (e *sqlAPIError) Is(target error) bool { return target == e.sentinel }

// scanAPIRow reads the API's row by column name: outcome, result, error, token,
// expires_at, lease_until, takeover (the last ones may be missing).
func scanAPIRow(rows *sql.Rows, name string) (Result, error) {
	cols, err := rows.Columns()
	if err != nil {
		return Result{}, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return Result{}, err
	}
	at := map[string]any{}
	for i, c := range cols {
		at[strings.ToLower(c)] = vals[i]
	}
	var res Result
	outcome, ok := textOf(at["outcome"])
	if !ok || outcome == "" {
		return Result{}, fmt.Errorf("idem: %s returned no outcome (columns %v)", name, cols)
	}
	res.Outcome = Outcome(outcome)
	if v, ok := textOf(at["result"]); ok {
		res.Result = json.RawMessage(v)
	}
	if v, ok := textOf(at["error"]); ok {
		res.Error = json.RawMessage(v)
	}
	if v, ok := textOf(at["takeover"]); ok {
		res.Takeover = v == "1" || v == "t" || v == "true"
	} else if b, ok := at["takeover"].(bool); ok {
		res.Takeover = b
	}
	if res.LeaseUntil, err = timeOf(at["lease_until"]); err != nil {
		return Result{}, fmt.Errorf("idem: %s returned lease_until: %w", name, err)
	}
	if v, ok := textOf(at["token"]); ok && v != "" {
		if res.Token, err = strconv.ParseInt(v, 10, 64); err != nil {
			return Result{}, fmt.Errorf("idem: %s returned the token %q: %w", name, v, err)
		}
	} else if n, ok := at["token"].(int64); ok {
		res.Token = n
	}
	if res.ExpiresAt, err = timeOf(at["expires_at"]); err != nil {
		return Result{}, fmt.Errorf("idem: %s returned expires_at: %w", name, err)
	}
	return res, nil
}

// textOf is v as text when it is text or bytes (a copy); ok false for NULL.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999",
}

// timeOf reads a timestamp a driver gave as time.Time or as text (MySQL without
// parseTime); text without a zone is UTC.
func timeOf(v any) (*time.Time, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case time.Time:
		t := x.UTC()
		return &t, nil
	}
	s, ok := textOf(v)
	if !ok {
		return nil, fmt.Errorf("unexpected type %T", v)
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("unreadable timestamp %q", s)
}

// claim claims r's key; retention > 0 sets how long its record is kept (else the
// API's default, for ever).
func (a sqlAPI) claim(ctx context.Context, tx *sql.Tx, r Request, retention time.Duration) (Result, error) {
	var keep any
	if retention > 0 {
		seconds := int64((retention + time.Second - 1) / time.Second)
		if a.d == Postgres {
			keep = strconv.FormatInt(seconds, 10) + " seconds"
		} else {
			keep = seconds
		}
	}
	return a.call(ctx, tx, "claim_v1", r.BizType, r.Key, nullable(r.Fingerprint), r.tenant(), keep)
}

func (a sqlAPI) complete(ctx context.Context, tx *sql.Tx, r Request, result json.RawMessage) error {
	res, err := a.call(ctx, tx, "complete_v1", r.BizType, r.Key, string(result), r.tenant())
	if err != nil {
		return err
	}
	return finishError("complete_v1", res.Outcome)
}

func (a sqlAPI) fail(ctx context.Context, tx *sql.Tx, r Request, retryable bool,
	failure json.RawMessage) error {
	res, err := a.call(ctx, tx, "fail_v1", r.BizType, r.Key, retryable, string(failure), r.tenant())
	if err != nil {
		return err
	}
	return finishError("fail_v1", res.Outcome)
}

// finishError: a complete or fail whose row reports a guard outcome that is not a
// success (the claim it finishes was lost) is that outcome's error.
func finishError(name string, o Outcome) error {
	if s, ok := outcomeErrors[string(o)]; ok {
		return fmt.Errorf("idem: %s answered %s: %w", name, o, s)
	}
	return nil
}
