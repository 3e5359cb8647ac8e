module github.com/idemgo/idem/outbox/mysql

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/outbox v0.1.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
