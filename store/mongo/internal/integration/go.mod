module github.com/idemgo/idem/store/mongo/internal/integration

go 1.26.0

require (
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/internal/ferretdbtest v0.1.0
	github.com/idemgo/idem/store/mongo v0.1.0
)
