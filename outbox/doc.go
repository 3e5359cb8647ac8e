// Package outbox is the producer side of idem: a transactional outbox and
// the relay that publishes it, so that an outgoing message is sent if and
// only if the business transaction that wrote it commits, at least once,
// always with the same stable id, and the consumer's idem guard removes
// the repeats.
//
// A handler writes its business rows and its outgoing messages in one
// transaction (with the inbox marker, inside idem.DoTx):
//
//	ob, _ := outboxpostgres.New(pool, outboxpostgres.Options{}) // outbox/postgres
//	_, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		if _, err := tx.Exec(ctx, `insert into charges ...`); err != nil {
//			return nil, err
//		}
//		return nil, ob.Enqueue(ctx, tx, outbox.Message{
//			Destination: "billing.charged",                  // topic, subject or exchange
//			OrderingKey: order.ID,                           // per order, in commit order
//			Payload:     body,
//		})                                                   // ID derived from the inbound key
//	})
//
// and every instance of the service runs a relay; one at a time holds the
// outbox's lease and publishes:
//
//	pub, _ := outboxnats.New(js, outboxnats.Options{})       // outbox/nats, /kafka, /amqp, /servicebus
//	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
//	go relay.Run(ctx)
//
// # What the relay guarantees
//
//   - A message goes out only after its transaction committed; a rolled
//     back transaction publishes nothing.
//   - Each message is published until the broker confirms it (Kafka's
//     produce ack, JetStream's PubAck, RabbitMQ's publisher confirm), then
//     marked published. A relay that dies between the two publishes it
//     again, with the same id: at least once, never "maybe".
//   - Per ordering key, messages go out in the order their transactions
//     committed, each only after the one before it is confirmed. A message
//     that fails holds back the later ones of its key, and nothing else:
//     other keys flow.
//   - Failures back off (RelayOptions.Backoff). A message the broker
//     rejects as invalid (ErrRejected) is parked, reported (EventParked,
//     Stats.Parked, idem outbox list --state parked) and not retried until
//     an operator says so (idem outbox retry); it still holds back its key,
//     because a key's order is a promise.
//   - One relay publishes at a time, across instances: the lease (a row of
//     the outbox's lease table, with a token that increases with every new
//     holder). A relay that dies is replaced when its lease ends; one that
//     stops gracefully releases it (EventLeaseReleased) so a standby takes
//     over at once. EventLeaseLost means a takeover or a failed renewal
//     only: alert on it, not on stops.
//   - Published messages are deleted after RelayOptions.Retention, in small
//     batches, by the lease holder only.
//
// # Stable ids
//
// The id is what makes the consumer side work: the publishers put it where
// the consumer adapters read it by default (Kafka: the idempotency-key
// header; NATS: Idem-Id, with Nats-Msg-Id set to idem.DedupID of the id and
// the content, so the broker's duplicate window never drops a conflict;
// RabbitMQ: MessageId; Service Bus: Idem-Id, with MessageID set to
// idem.DedupID for the entity's duplicate detection). See Prepare for ids
// derived from the inbound key.
//
// # Scheduled messages
//
// Message.NotBefore asks the broker to hold a message until a time. The
// Service Bus publisher sends it at once as a scheduled message
// (ScheduledEnqueueTime). Kafka, NATS and RabbitMQ cannot schedule: their
// publishers refuse such a message with a *ScheduleError (ErrCannotSchedule,
// ErrRejected), and the relay parks it rather than deliver it early.
//
// # Modules
//
// This package, outbox/memory, outbox/sqlite (database/sql; the caller
// opens the database) and outbox/outboxtest are the module
// github.com/idemgo/idem/outbox, which imports the standard library and
// idem only. Each leaf with a client of its own is its own module, so a
// program's module graph carries only the clients it imports:
//
//	github.com/idemgo/idem/outbox/postgres    pgx
//	github.com/idemgo/idem/outbox/mysql       go-sql-driver/mysql
//	github.com/idemgo/idem/outbox/kafka       franz-go (and broker/kafka)
//	github.com/idemgo/idem/outbox/nats        nats.go (and broker/nats)
//	github.com/idemgo/idem/outbox/amqp        amqp091-go (and broker/amqp)
//	github.com/idemgo/idem/outbox/servicebus  azservicebus (and broker/servicebus)
//	github.com/idemgo/idem/outbox/outboxotel  OpenTelemetry metrics
package outbox
