module github.com/idemgo/idem/store/mongo

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
	github.com/idemgo/idem/entity v0.0.0-00010101000000-000000000000
	go.mongodb.org/mongo-driver/v2 v2.10.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/xdg-go/scram v1.4.0 // indirect
	github.com/xdg-go/stringprep v1.0.4 // indirect
	github.com/youmark/pkcs8 v0.0.0-20240726163527-a2c0da244d78 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
