// Package amqpidem makes RabbitMQ (AMQP 0-9-1, amqp091-go) consumers
// idempotent. Its name avoids a clash with amqp091-go's package amqp:
//
//	import amqpidem "github.com/idemgo/idem/broker/amqp"
//
// A [Consumer] consumes a queue with manual acknowledgements and a QoS
// prefetch and runs the user's [Handler] under an [idem.Guard] on idem's
// consumer engine ([broker.Consumer]): this package is the engine's
// RabbitMQ transport (receive, ack, requeue, dead-letter publish). It has
// the shape every idem broker adapter has (see package
// github.com/idemgo/idem/broker): [NewGuard], [Handle] or [HandleTx],
// [NewConsumer] and [Consumer.Run] (or [Consume]), [MessageOf], one
// [broker.Report] per delivery passed to the Hooks, [DeadLetterOf] and
// [Replay] for dead letters, and [Publish] on the producer side. [Options]
// has the fields of [broker.Options] (Concurrency, Backoff, MaxHold,
// MaxDeliveries, ShutdownTimeout, Hooks) and adds the queue, the prefetch
// and the dead-letter destination.
//
//   - processed or duplicate: Ack, only after the record is durable;
//   - in progress elsewhere (a producer retry during a long handler, a
//     claim orphaned by a crashed consumer): held, unacked, not requeued,
//     so it adds nothing to a quorum queue's x-delivery-count. The
//     consumer claims the key again on the back-off, at the latest when
//     the holder's lease ends: it then finds the key completed (acked as a
//     duplicate), renewed (held on) or orphaned (stale: reconciled,
//     parked or retaken, by the guard's Stale policy). Past MaxHold it is requeued after the holder's lease;
//     on a quorum queue's last allowed delivery it is held without bound;
//   - the store cannot be reached: the delivery is held, unacked, and
//     claimed again on the back-off until the store answers, spending no
//     delivery (reported to the guard's observer as an idem.Outage);
//   - a transient handler error: the delivery is held, unacked, for the
//     back-off of Backoff, then Nack(requeue=true), which puts it back at
//     the head of the queue at once (RabbitMQ cannot delay a requeue).
//     Held deliveries keep counting against the prefetch, so a failing
//     queue slows down instead of spinning;
//   - conflict, permanent error, missing or invalid key, parked record,
//     MaxDeliveries handler failures: published to
//     [Options.DeadLetterExchange] / [Options.DeadLetterRoutingKey],
//     confirmed by the broker, then the original is acked. If the publish
//     is not confirmed the original is requeued instead, so nothing is
//     lost. Dead-lettering is at least once too: if the connection drops
//     between the confirm and the ack, the redelivery is dead-lettered
//     again, so readers of the dead-letter queue should expect the odd
//     repeat.
//
// Every hold keeps the delivery unacked on its channel, which RabbitMQ
// never redelivers while the channel is open, so no keep-alive is needed;
// but a delivery unacked for longer than the broker's consumer_timeout (30
// minutes by default) makes RabbitMQ close the channel (Run then returns
// [ErrDeliveriesClosed] and every unacked delivery is requeued): keep
// MaxHold, the back-off and the handlers well under it.
//
// The guide, with the delivery limit (quorum queues, x-delivery-limit) in depth:
// https://github.com/idemgo/idem/blob/main/docs/brokers/amqp.md
//
// # Hooks
//
// Each delivery yields one [broker.Report] (the guard's result and error,
// the action, the dead-letter reason, the hold before a requeue, the
// attempt), passed to the Hooks of [broker.Options]: BeforeSettle once the outcome is
// known and before the ack, the requeue or the dead letter (the worst
// moment to crash, and the place for work that must happen first);
// OnDeadLetter once a dead letter is confirmed (alert on conflicts there);
// AfterSettle after the action, with BrokerErr set when it failed. A held
// delivery yields its Report when it is settled. The guard's idem.Observer
// sees every outcome, every settle (idem.SettlementObserver), the errors
// the consumer handles by itself (failed dead-letter publishes, requeues
// on shutdown: idem.ErrorObserver) and store outages. A
// program with its own consume loop calls [Consumer.Process] per delivery.
//
// # Keys
//
// The guard is the one place for the key, as for the scope: its key
// function ([idem.Options.Key]) is applied to the [idem.Message] built by
// [MessageOf]: Message.ID is the AMQP message-id property (the default
// extractor, idem.MessageID, uses it), Headers are the AMQP headers rendered
// as text, ContentType the content-type property, CorrelationID the
// correlation-id property (never a key: the guard's observer events and
// logs carry it beside the key).
// idem.CloudEventsKey reads the CloudEvents AMQP binding's headers
// (cloudEvents:id / cloudEvents_id and the source) and structured-mode
// payloads. The delivery tag is never used: it numbers deliveries on one
// channel and changes on every redelivery.
//
// # Scope
//
// The scope is the consumer identity, held by the guard: [NewGuard] sets an
// empty idem.Options.Scope to the queue name and keeps a set one. Two
// services consuming copies of one message from their own queues then never
// block each other.
//
// # Replaying dead letters
//
// [Replay] publishes a dead letter back to the exchange and routing key of
// its original (x-idem-exchange, x-idem-routing-key) with its body, its
// original properties (message-id among them) and headers, without the
// headers idem added, and with an x-deduplication-header of its own (the
// original's, "~replay-" and a nonce, which MessageOf reads as the
// original's), so that the deduplication plugin, which remembers the
// original's, never drops a replay. The consumer's record then decides, as
// for any redelivery: a key completed meanwhile is a duplicate
// (acknowledged, the handler does not run), a key never completed is
// processed, a conflict is dead-lettered again. Replays often come long
// after the redelivery
// window: the guard's Retention must outlive the longest time a dead letter
// may wait before it is replayed, or a replay of a processed message runs
// again.
//
// # Producer side
//
// RabbitMQ has no broker-side duplicate detection of its own: a producer
// retry after a lost publisher confirm enqueues the message twice. [Publish]
// sets a stable message-id (and optionally CloudEvents headers) so the
// consumer's guard recognises the repeat, and waits for the publisher
// confirm when the channel is in confirm mode. Where the
// rabbitmq-message-deduplication plugin is enabled, its
// x-deduplication-header must never let the broker drop a conflict:
// Publish sets it to [idem.DedupID] of the id and the content's fingerprint
// ([idem.PayloadFingerprint], or the consumers' FingerprintFunc given with
// [WithFingerprint]), so retries of the same content collapse and an id
// reused with other content reaches the consumer, which dead-letters it.
package amqpidem
