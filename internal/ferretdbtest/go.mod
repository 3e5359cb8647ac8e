module github.com/idemgo/idem/internal/ferretdbtest

go 1.26.0

require (
	github.com/FerretDB/FerretDB v1.24.2
	github.com/idemgo/idem v0.1.0
)
