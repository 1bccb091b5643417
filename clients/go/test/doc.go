// Package test holds the tests of the Go client that need a database driver or a
// running `idem serve`: Do and Middleware against the PostgreSQL and MariaDB named
// by IDEM_TEST_POSTGRES_URL and IDEM_TEST_MYSQL_URL (scripts/services.sh), the
// HTTP client against the idem binary named by IDEM_BIN. It is a module of its own
// so that the client's module requires nothing.
package test
