// Package matrix runs the relay's end-to-end scenarios (outboxtest.RunRelay)
// on every outbox store with every publisher: SQLite (embedded),
// PostgreSQL and MariaDB, each with Kafka (kfake), NATS JetStream and
// RabbitMQ, on the servers internal/testenv names.
package matrix

import (
	"testing"

	"github.com/idemgo/idem/outbox/internal/integration/outboxenv"
	"github.com/idemgo/idem/outbox/outboxtest"
)

func TestRelayOnEveryStoreAndBroker(t *testing.T) {
	brokers := []struct {
		name string
		new  outboxtest.NewBroker
	}{
		{"Kafka", outboxenv.KafkaBroker},
		{"NATS", outboxenv.NATS},
		{"RabbitMQ", outboxenv.AMQPBroker},
		{"ServiceBus", outboxenv.ServiceBusBroker},
	}
	for _, s := range outboxenv.Stores {
		for _, b := range brokers {
			t.Run(s.Name+"/"+b.name, func(t *testing.T) {
				outboxtest.RunRelay(t, s.New, b.new)
			})
		}
	}
}
