module github.com/idemgo/idem/console

go 1.26.0

require (
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/outbox v0.1.0
)
