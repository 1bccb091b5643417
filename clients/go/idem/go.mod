module github.com/idem-io/idem/clients/go/idem

go 1.19
