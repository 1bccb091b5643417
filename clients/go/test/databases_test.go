package test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/lib/pq"

	"github.com/idem-io/idem/clients/go/idem"
)

// A database of the test process on one server, with idem's schema and SQL API
// installed by `idem migrate`.
type testDB struct {
	name    string       // "postgres" or "mysql"
	dialect idem.Dialect //
	db      *sql.DB      // the test's pool
	admin   *sql.DB      // a second pool: kills connections, reads records
	store   string       // the database as an idem store URL (idem serve --store)
}

// The driver logs every connection the tests kill ("unexpected EOF"); Do's retries
// are what the tests check.
func init() { mysql.SetLogger(log.New(io.Discard, "", 0)) } //nolint:errcheck

// idemBinary is $IDEM_BIN; the test fails without it (CTest always sets it).
func idemBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("IDEM_BIN")
	if bin == "" {
		t.Fatal("IDEM_BIN is not set: it names the idem binary (ctest sets it)")
	}
	return bin
}

// pgDSN is a lib/pq URL for the database `name` of the server of a postgres:// URL.
func pgDSN(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// mysqlDSN is a go-sql-driver/mysql DSN for the database `name` of a mysql:// URL.
func mysqlDSN(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}

// withDatabase is a store URL (for idem migrate) naming the database `name`.
func withDatabase(base, name string) string {
	u, _ := url.Parse(base)
	u.Path = "/" + name
	return u.String()
}

// openTestDB creates a fresh database on the server of env (dropped when the test
// ends), installs idem's SQL API into it, and opens it. Skips when env is unset.
func openTestDB(t *testing.T, env string) *testDB {
	t.Helper()
	base := os.Getenv(env)
	if base == "" {
		t.Skipf("%s is not set: start the databases with scripts/services.sh start DIR and "+
			"source DIR/env.sh", env)
	}
	bin := idemBinary(t)
	name := fmt.Sprintf("idem_go_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	d := &testDB{}
	var baseDSN, dsn string
	var err error
	if strings.HasPrefix(base, "postgres") {
		d.name, d.dialect = "postgres", idem.Postgres
		if baseDSN, err = pgDSN(base, strings.TrimPrefix(mustParse(t, base).Path, "/")); err == nil {
			dsn, err = pgDSN(base, name)
		}
	} else {
		d.name, d.dialect = "mysql", idem.MySQL
		if baseDSN, err = mysqlDSN(base, strings.TrimPrefix(mustParse(t, base).Path, "/")); err == nil {
			dsn, err = mysqlDSN(base, name)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	driver := map[string]string{"postgres": "postgres", "mysql": "mysql"}[d.name]
	root, err := sql.Open(driver, baseDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	ctx := context.Background()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("CREATE DATABASE %s: %v", name, err)
	}
	t.Cleanup(func() { // after the pools' Cleanup below (last in, first out)
		if err := dropDatabase(ctx, root, d.name, name); err != nil {
			t.Logf("DROP DATABASE %s: %v", name, err)
		}
	})
	if d.name == "postgres" {
		// The test role is named idem, so "$user" in the default search_path would
		// become the SQL API's schema idem once it exists: pin the store to public.
		if _, err := root.ExecContext(ctx, "ALTER DATABASE "+name+" SET search_path = public"); err != nil {
			t.Fatal(err)
		}
	}
	d.store = withDatabase(base, name)
	out, err := exec.Command(bin, "migrate", "--store", d.store).CombinedOutput()
	if err != nil {
		t.Fatalf("idem migrate: %v\n%s", err, out)
	}
	// sql.Open only checks the DSN's form: it connects on first use.
	if d.db, err = sql.Open(driver, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.db.Close() })
	if d.admin, err = sql.Open(driver, dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.admin.Close() })
	d.admin.SetMaxOpenConns(4)
	return d
}

// dropDatabase drops a test database. On PostgreSQL, WITH (FORCE) also ends the
// sessions the test killed that are still closing, but PostgreSQL 15 refuses it
// (42501, "must be a member of the role whose process is being terminated") while an
// autovacuum worker is in the database: a plain DROP stops that worker itself and
// waits up to 5 s for the other sessions. Tried in turn.
func dropDatabase(ctx context.Context, root *sql.DB, dialect, name string) error {
	if dialect != "postgres" {
		_, err := root.ExecContext(ctx, "DROP DATABASE "+name)
		return err
	}
	for attempt := 1; ; attempt++ {
		_, err := root.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		var refused *pq.Error
		if err == nil || !errors.As(err, &refused) || refused.Code != "42501" {
			return err
		}
		if _, err = root.ExecContext(ctx, "DROP DATABASE "+name); err == nil || attempt >= 5 {
			return err
		}
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return u
}

// forEachDB runs f as a subtest on PostgreSQL and on MariaDB.
func forEachDB(t *testing.T, f func(t *testing.T, d *testDB)) {
	for _, env := range []string{"IDEM_TEST_POSTGRES_URL", "IDEM_TEST_MYSQL_URL"} {
		env := env
		name := map[string]string{"IDEM_TEST_POSTGRES_URL": "postgres",
			"IDEM_TEST_MYSQL_URL": "mysql"}[env]
		t.Run(name, func(t *testing.T) { f(t, openTestDB(t, env)) })
	}
}

// ph is the n-th placeholder of the dialect.
func (d *testDB) ph(n int) string {
	if d.dialect == idem.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// exec runs a statement on the admin pool, failing the test on error.
func (d *testDB) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := d.admin.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// count is the one integer q answers.
func (d *testDB) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := d.admin.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// createLedger makes the business table of the refund tests.
func (d *testDB) createLedger(t *testing.T) {
	t.Helper()
	d.exec(t, "CREATE TABLE ledger (refund_key VARCHAR(255) NOT NULL, refund_id VARCHAR(255) NOT NULL, "+
		"amount BIGINT NOT NULL)")
}

// connectionID is the server's id of tx's connection.
func (d *testDB) connectionID(ctx context.Context, tx *sql.Tx) (int64, error) {
	q := "SELECT CONNECTION_ID()"
	if d.dialect == idem.Postgres {
		q = "SELECT pg_backend_pid()"
	}
	var id int64
	err := tx.QueryRowContext(ctx, q).Scan(&id)
	return id, err
}

// kill ends the connection `id` from a second connection, as an operator would
// (pg_terminate_backend, KILL CONNECTION).
func (d *testDB) kill(id int64) error {
	if d.dialect == idem.Postgres {
		_, err := d.admin.Exec("SELECT pg_terminate_backend($1)", id)
		return err
	}
	_, err := d.admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id))
	return err
}

// processing counts the records left PROCESSING (state 0).
func (d *testDB) processing(t *testing.T) int {
	return d.count(t, "SELECT COUNT(*) FROM idem_records WHERE state = 0")
}
