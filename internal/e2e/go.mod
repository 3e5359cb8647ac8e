module github.com/idemgo/idem/internal/e2e

go 1.26.0

replace github.com/idemgo/idem => ../..

replace github.com/idemgo/idem/store/sqlite => ../../store/sqlite

replace github.com/idemgo/idem/store/postgres => ../../store/postgres

replace github.com/idemgo/idem/store/mysql => ../../store/mysql

replace github.com/idemgo/idem/store/redis => ../../store/redis

replace github.com/idemgo/idem/store/mongo => ../../store/mongo

replace github.com/idemgo/idem/entity => ../../entity

replace github.com/idemgo/idem/job => ../../job

replace github.com/idemgo/idem/load => ../../load

replace github.com/idemgo/idem/outbox => ../../outbox

replace github.com/idemgo/idem/broker/kafka => ../../broker/kafka

replace github.com/idemgo/idem/broker/nats => ../../broker/nats

replace github.com/idemgo/idem/broker/amqp => ../../broker/amqp

replace github.com/idemgo/idem/broker/servicebus => ../../broker/servicebus

replace github.com/idemgo/idem/broker/brokertest => ../../broker/brokertest

replace github.com/idemgo/idem/idemhttp => ../../idemhttp

replace github.com/idemgo/idem/idemotel => ../../idemotel

replace github.com/idemgo/idem/idemprom => ../../idemprom

replace github.com/idemgo/idem/console => ../../console

replace github.com/idemgo/idem/internal/pgxtx => ../../internal/pgxtx

replace github.com/idemgo/idem/internal/pgtest => ../../internal/pgtest

replace github.com/idemgo/idem/internal/consumetest => ../../internal/consumetest

replace github.com/idemgo/idem/cmd/idem => ../../cmd/idem

replace github.com/idemgo/idem/examples => ../../examples

require (
	github.com/idemgo/idem v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/broker/amqp v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/broker/kafka v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/broker/nats v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/idemgo/idem/store/postgres v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.13.0
	github.com/nats-io/nats.go v1.55.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

require (
	github.com/idemgo/idem/internal/pgxtx v0.0.0-00010101000000-000000000000 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
