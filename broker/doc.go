// Package broker is what every idem broker adapter shares: the handler a
// consumer runs (Handle for two-phase work, HandleTx for the transactional
// inbox), the Report of what happened to one delivery, and the Hooks a user
// plugs into every adapter's flow. broker/brokertest is the conformance
// suite every adapter runs.
//
// # One shape
//
// Every adapter (broker/kafka, broker/nats, broker/amqp, and those to come)
// is used the same way:
//
//	g, err := natsidem.NewGuard(store, cons, idem.Options{})   // scope: the consumer's identity
//	c, err := natsidem.NewConsumer(cons, g, natsidem.Handle(fn), natsidem.Options{...})
//	err = c.Run(ctx)                                           // until ctx ends
//
// or, in one call, natsidem.Consume(ctx, cons, g, natsidem.Handle(fn), opts).
//
//   - The guard holds the scope and the key function, and only the guard:
//     idem.Options.Scope and idem.Options.Key are the one place for each.
//     The adapter's NewGuard fills an empty Scope with the consumer's
//     identity (the consumer group, the durable name, the queue) and leaves a
//     set one alone; the adapter's MessageOf puts the transport's stable id
//     in idem.Message.ID, so the default key (idem.MessageID) works on every
//     broker.
//   - Handle(fn) runs fn under idem.Guard.Do (two-phase: side effects
//     outside the database); HandleTx(fn) runs it inside the store's
//     transaction with the dedup marker (idem.DoTx). A HandleTx handler
//     whose guard's store has no transactions of its type is refused by
//     NewConsumer.
//   - Outcomes are settled alike: ack after the record is durable
//     (processed, duplicate); wait for the holder's lease when the key is in
//     progress elsewhere (idem.RetryAfter), without spending the broker's
//     delivery limit on a live duplicate; retry transient failures with
//     back-off; dead-letter conflicts, permanent failures, poison (no key)
//     and parked records with idem.DeadLetterHeaders and the transport's
//     own position (sequence, offset).
//   - Each delivery yields one Report, passed to the Hooks.
//
// # Package names
//
// An adapter package is named for the system it adapts (kafka, postgres,
// mysql, sqlite, memory, servicebus), unless that name is the package name
// of the client library a user imports beside it; then the name takes the
// suffix of its role: "idem" for broker adapters (natsidem beside nats.go's
// nats, amqpidem beside amqp091-go's amqp), "store" for stores (redisstore
// beside go-redis's redis). The import path is always the plain name
// (github.com/idemgo/idem/broker/nats).
package broker
