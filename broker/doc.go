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
// # The engine and its transports
//
// The consumer flow is written once, here: Consumer[M] (NewConsumer) runs
// a Handler for every delivery a Transport[M] receives. It owns the
// concurrency slots, the hold of a key in progress elsewhere (claimed
// again on the back-off, at most a second apart, and at the latest when
// the holder's lease ends, within MaxHold), the store-outage hold, Decide,
// the hook order (BeforeSettle, the action, OnDeadLetter, AfterSettle),
// the dead-letter headers (DeadLetterHeaders), the delivery limit and the
// graceful shutdown. Options is the one vocabulary (Concurrency, Backoff,
// MaxHold, MaxDeliveries, ShutdownTimeout, Hooks), embedded by every
// adapter's options.
//
// A transport only moves messages. Its contract:
//
//   - Receive(ctx, n) blocks until it has one to n deliveries, or returns
//     ctx's error; other errors are reported and Receive is called again
//     after the back-off, unless they wrap ErrClosed (then Run returns).
//   - Message(msg) is the guard's view (the transport's stable id in
//     Message.ID); Delivery(msg) the broker's delivery count and whether
//     it is the last the broker allows (then it is never handed back).
//   - Ack settles a delivery whose record is durable; Retry hands it back
//     for a redelivery after a delay; DeadLetter moves it, with the
//     engine's headers and the transport's own position (sequence,
//     offset), to the dead-letter destination and settles the original,
//     returning only once the dead letter is durable.
//   - Optional: KeepAliver (extend a lock, an ack deadline: called while
//     a delivery is handled or held — on the guard's lease heartbeat while
//     a two-phase handler runs, one clock for both, on the engine's timer
//     otherwise; ErrLockLost cancels the handler),
//     Delayer (Retry cannot delay: the engine waits the delay out, kept
//     alive), Returner (a cheaper give-back at shutdown), Drainer (a
//     prefetch buffer given back at shutdown), InPlace (Ack and Retry
//     settle nothing at the broker: no settle context for them), Runner
//     (some handlers run the transport's way: Kafka's batch claims).
//
// The engine's guarantees, the same on every broker:
//
//   - A store outage is not the message's fault: a delivery whose claim,
//     marker, commit or completion meets a store that cannot be reached
//     is held (kept alive, its worker and slot kept, so no more are
//     received) and claimed again on the back-off until the store answers
//     or shutdown, spending none of the broker's deliveries; the outage is
//     reported through Hooks.OnError as an *OutageError at most every
//     OutageReportEvery, and each failed call reaches the guard's
//     observer. At shutdown a held delivery is handed back, except the
//     broker's last allowed one, held until ShutdownTimeout.
//   - The handler's own failures are counted durably (the record's
//     attempts in two-phase mode, the broker's delivery count in the
//     inbox) and dead-letter a message with ReasonMaxDeliver at
//     MaxDeliveries; a retry on the broker's last allowed delivery is
//     dead-lettered with ReasonMaxDeliver rather than handed to a broker
//     that would drop it.
//
// brokertest runs the engine over each transport.
//
// # Package names
//
// An adapter package is named for the system it adapts (kafka, postgres,
// mysql, sqlite, memory, servicebus), unless that name is the package name
// of the client library a user imports beside it; then the name takes the
// suffix of its role: "idem" for broker adapters (natsidem beside nats.go's
// nats, amqpidem beside amqp091-go's amqp), "store" for stores (redisidem
// beside go-redis's redis). The import path is always the plain name
// (github.com/idemgo/idem/broker/nats).
package broker
