// Package watermillidem makes Watermill router handlers idempotent on any
// idem store (memory, Redis, PostgreSQL, MySQL, SQLite, MongoDB): a router
// middleware (message.HandlerMiddleware) that claims each message's key,
// runs the handler, publishes what it produced and completes the record,
// on idem's consumer engine (broker.Consumer), so that holds, store
// outages and delivery limits behave as on every other broker.
//
//	g, err := watermillidem.NewGuard(store, "billing", idem.Options{}) // scope: the handler's name
//	mw, err := watermillidem.New(g, watermillidem.Options{Publisher: pub, PoisonTopic: "orders.poison"})
//	router.AddHandler("billing", "orders", sub, "receipts", pub, watermillidem.Handle(mw, handler))
//	err = router.Run(ctx)
//
// It has the shape of every idem broker adapter (see package
// github.com/idemgo/idem/broker) where Watermill leaves room for it:
// NewGuard (scope: the handler's name), Handle (two-phase; the same as
// adding mw.Middleware) or HandleTx (the store's transaction with the
// dedup marker), MessageOf, DeadLetterOf and Replay for dead letters, and
// Publish on the producer side: the key in the Idem-Id metadata field, the
// UUID derived from the key and the content. There is no NewConsumer and
// no Consume, because Watermill's router is the consumer: it subscribes,
// schedules the handler calls and acks or nacks what they return, so New
// builds the middleware and router.Run runs it. For the same reason
// Options has the engine's Backoff, MaxHold, MaxDeliveries and Hooks but
// no Concurrency and no ShutdownTimeout: the router owns how many
// messages run at once and how long its shutdown waits (CloseTimeout).
//
// Unlike Watermill's Deduplicator, which records a message before its
// handler runs and only in memory, a key is recorded as done only once
// the handler has succeeded and its produced messages are published:
//
//   - a handler error releases the claim and, after the back-off
//     (Options.Backoff), is returned as a *RetryError: the router nacks,
//     the Pub/Sub redelivers, and the redelivery runs the handler again;
//   - a duplicate (its key completed) is acked without running the handler
//     and returns no messages: what the first delivery produced is not
//     published again; its Report carries the recorded result;
//   - a key in progress elsewhere is held (claimed again on the back-off)
//     until its holder finishes, then acked as a duplicate, or nacked
//     after MaxHold;
//   - a store that cannot be reached holds the message, claimed again on
//     the back-off, until it answers or the message's context ends;
//   - a conflict (the same id with other content), a permanent failure
//     (idem.Permanent), a message without a usable key, a parked record and,
//     with MaxDeliveries, a message that failed that often are published to
//     PoisonTopic with idem's headers as metadata (broker.DeadLetterHeaders,
//     and the *_poisoned fields of Watermill's PoisonQueue) and acked.
//
// The key is the message's UUID (or its Idem-Id metadata field: MessageOf),
// which the publisher sets and Pub/Subs keep across redeliveries; a
// publisher that retries must keep the UUID. The scope is the guard's:
// name it for the handler. Two handlers of one topic need a middleware
// each, with guards of their own scopes (one middleware refuses the
// second: ErrSharedScope). The messages a handler
// produces are published by the middleware, through Options.Publisher, to
// the handler's publish topic, before the record is completed; a crash
// between the two publishes them again, so downstream handlers should be
// idempotent too (give produced messages a UUID from idem.DeriveKey).
//
// Watermill counts no deliveries: Report.Attempt is always 1, and the
// handler's failures are counted in the record (MaxDeliveries).
//
// The guide: https://github.com/idemgo/idem/blob/main/docs/brokers/watermill.md
package watermillidem
