module github.com/idemgo/idem/internal/pgxtx

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

require github.com/jackc/pgx/v5 v5.13.0

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	golang.org/x/text v0.41.0 // indirect
)
