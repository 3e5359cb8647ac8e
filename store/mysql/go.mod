module github.com/idemgo/idem/store/mysql

go 1.26.0

replace github.com/idemgo/idem => ../..

replace github.com/idemgo/idem/store/mysql => ../../store/mysql

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/idemgo/idem v0.0.0-00010101000000-000000000000
)

require filippo.io/edwards25519 v1.2.0 // indirect
