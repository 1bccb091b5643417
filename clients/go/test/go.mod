module github.com/idem-io/idem/clients/go/test

go 1.19

require (
	github.com/go-sql-driver/mysql v0.0.0
	github.com/idem-io/idem/clients/go/idem v0.0.0
	github.com/lib/pq v0.0.0
)

// The client under test, and the drivers Debian ships (golang-github-lib-pq-dev,
// golang-github-go-sql-driver-mysql-dev), so the tests build offline (GOPROXY=off).
replace github.com/idem-io/idem/clients/go/idem => ../idem

replace github.com/lib/pq => /usr/share/gocode/src/github.com/lib/pq

replace github.com/go-sql-driver/mysql => /usr/share/gocode/src/github.com/go-sql-driver/mysql
