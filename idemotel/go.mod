module github.com/idemgo/idem/idemotel

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
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
