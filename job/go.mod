module github.com/idemgo/idem/job

go 1.26.0

replace github.com/idemgo/idem => ..

replace github.com/idemgo/idem/store/sqlite => ../store/sqlite

replace github.com/idemgo/idem/store/postgres => ../store/postgres

replace github.com/idemgo/idem/store/mysql => ../store/mysql

replace github.com/idemgo/idem/store/redis => ../store/redis

replace github.com/idemgo/idem/store/mongo => ../store/mongo

replace github.com/idemgo/idem/entity => ../entity

replace github.com/idemgo/idem/job => ../job

replace github.com/idemgo/idem/load => ../load

replace github.com/idemgo/idem/outbox => ../outbox

replace github.com/idemgo/idem/broker/kafka => ../broker/kafka

replace github.com/idemgo/idem/broker/nats => ../broker/nats

replace github.com/idemgo/idem/broker/amqp => ../broker/amqp

replace github.com/idemgo/idem/broker/servicebus => ../broker/servicebus

replace github.com/idemgo/idem/broker/brokertest => ../broker/brokertest

replace github.com/idemgo/idem/idemhttp => ../idemhttp

replace github.com/idemgo/idem/idemotel => ../idemotel

replace github.com/idemgo/idem/idemprom => ../idemprom

replace github.com/idemgo/idem/console => ../console

replace github.com/idemgo/idem/internal/pgxtx => ../internal/pgxtx

replace github.com/idemgo/idem/internal/pgtest => ../internal/pgtest

replace github.com/idemgo/idem/internal/consumetest => ../internal/consumetest

replace github.com/idemgo/idem/cmd/idem => ../cmd/idem

replace github.com/idemgo/idem/examples => ../examples

require (
	github.com/idemgo/idem v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/store/postgres v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/store/sqlite v0.0.0-00010101000000-000000000000
)

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/idemgo/idem/internal/pgxtx v0.0.0-00010101000000-000000000000 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.62.0 // indirect
)
