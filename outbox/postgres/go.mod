module github.com/idemgo/idem/outbox/postgres

go 1.26.0

replace (
	github.com/idemgo/idem v0.1.0 => ../..
	github.com/idemgo/idem/broker/amqp v0.1.0 => ../../broker/amqp
	github.com/idemgo/idem/broker/brokertest v0.1.0 => ../../broker/brokertest
	github.com/idemgo/idem/broker/kafka v0.1.0 => ../../broker/kafka
	github.com/idemgo/idem/broker/mqtt v0.1.0 => ../../broker/mqtt
	github.com/idemgo/idem/broker/nats v0.1.0 => ../../broker/nats
	github.com/idemgo/idem/broker/redisstream v0.1.0 => ../../broker/redisstream
	github.com/idemgo/idem/broker/servicebus v0.1.0 => ../../broker/servicebus
	github.com/idemgo/idem/broker/watermill v0.1.0 => ../../broker/watermill
	github.com/idemgo/idem/cmd/idem v0.1.0 => ../../cmd/idem
	github.com/idemgo/idem/console v0.1.0 => ../../console
	github.com/idemgo/idem/entity v0.1.0 => ../../entity
	github.com/idemgo/idem/examples v0.1.0 => ../../examples
	github.com/idemgo/idem/idemgrpc v0.1.0 => ../../idemgrpc
	github.com/idemgo/idem/idemhttp v0.1.0 => ../../idemhttp
	github.com/idemgo/idem/idemotel v0.1.0 => ../../idemotel
	github.com/idemgo/idem/idemprom v0.1.0 => ../../idemprom
	github.com/idemgo/idem/internal/consumetest v0.1.0 => ../../internal/consumetest
	github.com/idemgo/idem/internal/e2e v0.1.0 => ../../internal/e2e
	github.com/idemgo/idem/internal/pgtest v0.1.0 => ../../internal/pgtest
	github.com/idemgo/idem/internal/pgxtx v0.1.0 => ../../internal/pgxtx
	github.com/idemgo/idem/internal/release v0.1.0 => ../../internal/release
	github.com/idemgo/idem/job v0.1.0 => ../../job
	github.com/idemgo/idem/load v0.1.0 => ../../load
	github.com/idemgo/idem/outbox v0.1.0 => ../../outbox
	github.com/idemgo/idem/outbox/amqp v0.1.0 => ../../outbox/amqp
	github.com/idemgo/idem/outbox/internal/integration v0.1.0 => ../../outbox/internal/integration
	github.com/idemgo/idem/outbox/kafka v0.1.0 => ../../outbox/kafka
	github.com/idemgo/idem/outbox/mysql v0.1.0 => ../../outbox/mysql
	github.com/idemgo/idem/outbox/nats v0.1.0 => ../../outbox/nats
	github.com/idemgo/idem/outbox/outboxotel v0.1.0 => ../../outbox/outboxotel
	github.com/idemgo/idem/outbox/postgres v0.1.0 => ../../outbox/postgres
	github.com/idemgo/idem/outbox/servicebus v0.1.0 => ../../outbox/servicebus
	github.com/idemgo/idem/store/mongo v0.1.0 => ../../store/mongo
	github.com/idemgo/idem/store/mysql v0.1.0 => ../../store/mysql
	github.com/idemgo/idem/store/postgres v0.1.0 => ../../store/postgres
	github.com/idemgo/idem/store/redis v0.1.0 => ../../store/redis
	github.com/idemgo/idem/store/sqlite v0.1.0 => ../../store/sqlite
	github.com/idemgo/idem/store/storetest/lincheck v0.1.0 => ../../store/storetest/lincheck
	github.com/idemgo/idem/store/storetest/lincheck/stores v0.1.0 => ../../store/storetest/lincheck/stores
)

require (
	github.com/idemgo/idem v0.1.0
	github.com/idemgo/idem/outbox v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
