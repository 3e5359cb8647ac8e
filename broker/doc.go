// Package broker is idem's consumer engine and what every broker adapter
// shares: the Handler a consumer runs (Handle: two-phase; HandleTx: the
// transactional inbox), the Options, the Report of one delivery and the
// Hooks around it. broker/brokertest is the suite every adapter runs.
//
// # One shape
//
// Every adapter is used the same way (natsidem here):
//
//	g, err := natsidem.NewGuard(store, cons, idem.Options{})   // scope: the consumer's identity
//	c, err := natsidem.NewConsumer(cons, g, natsidem.Handle(fn), natsidem.Options{...})
//	err = c.Run(ctx)                                           // until ctx ends
//
// or natsidem.Consume(ctx, cons, g, natsidem.Handle(fn), opts) in one call.
// Every adapter exports the same names for the same ideas: NewGuard,
// Handle, HandleTx, NewConsumer, Consume, MessageOf, DeadLetterOf, Replay
// (a replay gets a broker dedup id of its own) and a producer helper,
// Publish or Send, that sets the key and a dedup id from key and content.
// Watermill alone has no NewConsumer or Consume: its router is the
// consumer (internal/release/api's TestAdapterSurface holds every adapter
// to this list).
// The guard is the one place for the scope and the key (the adapter's
// MessageOf puts the broker's stable id in idem.Message.ID); Handle runs fn
// under idem.Guard.Do, HandleTx in the store's transaction with the dedup
// marker (idem.DoTx). A duplicate is acked, a key in progress elsewhere
// waits for its holder, a transient failure is retried with back-off, and
// conflicts, permanent failures, poison and parked records are
// dead-lettered with DeadLetterHeaders; each delivery yields one Report.
//
// # The engine
//
// Three parts. An Engine (NewEngine) is a guard, a handler and Options,
// checked once. A Processor (Engine.Processor, NewProcessor) runs one
// delivery end to end over a Settler: claim and handler, the hold of a key
// in progress elsewhere (claimed again on the back-off, at the latest when
// the holder's lease ends, within MaxHold), the store-outage hold,
// Decide, the hooks (BeforeSettle, the action, OnDeadLetter, AfterSettle),
// the settle, the delivery limit, the keep-alive. A Consumer
// (Engine.Consumer, NewConsumer) schedules what a Transport receives on
// its Processor: slots, the receive loop, graceful shutdown. An adapter
// whose broker schedules for it (Kafka partitions, Service Bus sessions,
// SQS FIFO groups, a Watermill router) keeps an Engine and calls a
// Processor per unit.
//
// A Settler moves messages and nothing else: Message (the guard's view),
// Delivery (the broker's count, and whether this is its last allowed
// delivery: never handed back), Ack (the record is durable), Retry (a
// redelivery after a delay) and DeadLetter (durable before it returns,
// the original settled; on error it is retried). A Transport adds
// Receive(ctx, n): one to n deliveries, ctx's error, or an error wrapping
// ErrClosed to end Run. Optional capabilities, read once when a Processor
// is made: KeepAliver (extend a lock or an ack deadline while a delivery is
// handled or held; ErrLockLost cancels the handler and nothing is settled),
// Delayer (Retry cannot delay: the engine waits), InPlace (Ack and Retry
// need no settle context), Runner (handlers run the transport's way:
// Kafka's batch claims), Returner and Drainer (a Consumer's give-back and
// prefetch at shutdown).
//
// The guarantees, the same on every broker: a store outage is not the
// message's fault (the delivery is held, kept alive, spending none of the
// broker's deliveries; reported as an idem.Outage, with the guard's scope,
// at most every OutageReportEvery); the handler's failures are counted durably (the
// record's attempts, or the broker's count in the inbox) and dead-letter
// with ReasonMaxDeliver at MaxDeliveries; a retry on the broker's last
// allowed delivery is dead-lettered rather than dropped; at shutdown what
// was not started is given back, and a last delivery is handled instead.
//
// # Observing
//
// The engine reports to its guard's observer (idem.Options.Observer), so
// one observer set once sees a consumer whole: each delivery's settle
// (idem.SettlementObserver: the Report, after the broker action), the
// errors the engine and its adapter handle by themselves
// (idem.ErrorObserver: a failed fetch, commit, keep-alive or broker
// action; adapters call Engine.ReportError or Consumer.ReportError) and
// store outages (idem.OutageObserver). Hooks are not for observing: they
// are the user's typed places in the flow (BeforeSettle, where a chaos
// harness kills the process; OnDeadLetter with the message at hand).
//
// # Package names
//
// An adapter package is named for the system it adapts (kafka,
// servicebus), unless that is the name of the client library beside it;
// then it takes its role's suffix: natsidem beside nats.go's nats,
// amqpidem beside amqp091-go's amqp, redisidem beside go-redis's redis.
// The import path is always the plain name
// (github.com/idemgo/idem/broker/nats).
package broker
