module github.com/idemgo/idem/broker/amqp

go 1.26.0

require (
	github.com/idemgo/idem v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
)
