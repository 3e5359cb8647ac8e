// Package natsidem makes NATS JetStream consumers idempotent. Its name
// avoids a clash with nats.go's package nats:
//
//	import natsidem "github.com/idemgo/idem/broker/nats"
//
// A [Consumer] pulls messages from a jetstream.Consumer, runs the user's
// [Handler] under an [idem.Guard] and maps each outcome to a JetStream
// action with [broker.Decide]. It has the shape every idem broker adapter
// has (see package github.com/idemgo/idem/broker): [NewGuard], [Handle] or
// [HandleTx], [NewConsumer] and [Consumer.Run] (or [Consume]),
// [MessageOf], one [broker.Report] per message passed to [broker.Options.Hooks],
// [DeadLetterOf] and [Replay] for dead letters, and [Publish] on the
// producer side.
//
//   - processed or duplicate: Ack (DoubleAck with [Options.DoubleAck]), only
//     after the record is durable;
//   - in progress elsewhere (a producer retry during a long handler, a
//     claim orphaned by a crashed consumer): held, not nak'ed. The
//     consumer keeps telling the server the message is in progress (so it
//     spends no delivery of the consumer's MaxDeliver) and claims the key
//     again on the back-off, at the latest when the holder's lease ends:
//     it then finds the key completed (acked as a duplicate), renewed (held
//     on) or orphaned (stale: reconciled, parked or retaken, by the
//     guard's Stale policy). Past
//     [broker.Options.MaxHold], or when Run shuts down, it is nak'ed with the delay
//     until the holder's lease ends ([idem.RetryAfter]); on its last allowed
//     delivery it is held without bound, so a live duplicate is not
//     dead-lettered as max_deliver (only a shutdown that outlasts
//     [broker.Options.ShutdownTimeout] during that hold does: a nak would let
//     JetStream drop it);
//   - a store that cannot be reached (down, restarting, timing out): held,
//     not nak'ed: kept in progress at the server and claimed again on the
//     back-off until the store answers, spending none of MaxDeliver (a
//     database restart must not dead-letter orders); reported to the
//     guard's observer as an idem.Outage at most every ten seconds.
//     At shutdown it is nak'ed;
//   - a transient handler error: NakWithDelay with the back-off of the
//     engine's Backoff (redelivered later); after MaxDeliveries handler
//     failures (default: the consumer's MaxDeliver), or on the consumer's
//     last allowed delivery, dead-lettered with reason max_deliver
//     ([broker.ReasonMaxDeliver]) instead, which JetStream would drop;
//   - conflict, permanent error, missing or invalid key, parked record:
//     published to [Options.DeadLetterSubject], then Term. If the dead-letter
//     publish fails the message is not terminated but retried, so nothing
//     is lost.
//
// Usage, two-phase (the side effect lives outside the store):
//
//	cons, _ := js.Consumer(ctx, "ORDERS", "billing")
//	g, _ := natsidem.NewGuard(store, cons, idem.Options{}) // scope "ORDERS/billing"
//	h := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
//		return nil, charge(ctx, idem.DeriveKey(ctx, "charge"), msg.Data())
//	})
//	c, _ := natsidem.NewConsumer(cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq", Concurrency: 8})
//	err := c.Run(ctx)
//
// With a store that has a transactional inbox (store/sqlite, store/postgres,
// store/mysql), [HandleTx] runs the handler inside the store's transaction
// together with the dedup marker (idem.DoTx):
//
//	h := natsidem.HandleTx(func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) ([]byte, error) {
//		_, err := tx.ExecContext(ctx, `insert into charges(order_id, amount) values (?, ?)`, ...)
//		return nil, err
//	})
//	err := natsidem.Consume(ctx, cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq"})
//
// NewConsumer checks everything once: the options, and that a HandleTx
// handler's store has transactions of its type.
//
// The guide, with keys, dead letters, replays, clusters and the producer side in depth:
// https://github.com/idemgo/idem/blob/main/docs/brokers/nats.md
//
// # At the delivery limit
//
// JetStream stops delivering a message at the consumer's MaxDeliver and
// drops it silently. The consumer never lets it get there by itself: a
// retry on the last allowed delivery is dead-lettered with reason
// max_deliver and idem's headers, and a key in progress elsewhere or a
// store outage on it is held rather than nak'ed. One case is left: the
// process holding the last delivery dies (SIGKILL, lost connection)
// before settling it. JetStream then publishes its max-deliveries
// advisory, once, on a core subject. Every Run keeps the advisories of its
// consumer in a stream of their own ("IDEM_ADVISORIES_<stream>_<consumer>",
// a work queue kept 7 days, made by the first Run: Options.AdvisoryStream)
// and reads them with a durable consumer the fleet's Runs share, so an
// advisory raised while the whole fleet is down is handled by the next Run:
// the message is read from the stream by its sequence and, unless its key
// is completed in the store with its content (it was applied),
// dead-lettered with reason max_deliver, its Idem-Stream-Seq and
// Idem-Deliveries; the advisory is acknowledged only then, and each is
// reported to the guard's observer (idem.ErrorObserver) as a
// [MaxDeliveriesError]. The stream
// must outlive the gap: a message given up on and its advisory both
// expired before any Run came back is gone. Without permission to create
// streams (or with AdvisoryStream "-") Runs listen on a plain subscription,
// and an advisory raised while no Run is up is missed. MaxDeliver -1 (no
// limit; idem's MaxDeliveries still dead-letters a failing handler) has no
// such case at all.
//
// # Hooks
//
// Each message yields one [broker.Report] (the guard's result and error,
// the action, the dead-letter reason, the nak delay, the delivery count),
// passed to [broker.Options.Hooks]: BeforeSettle once the outcome is known and
// before the ack, nak or dead letter (the worst moment to crash, and the
// place for work that must happen first); OnDeadLetter once a dead letter
// is stored by its stream (alert on conflicts there); AfterSettle after the
// action, with BrokerErr set when it failed. The errors the consumer
// handles by itself (fetch errors, failed dead-letter publishes) go to the
// guard's observer (idem.ErrorObserver).
// A held message yields its Report when it is settled. The guard's
// idem.Observer sees every outcome as well. A program with its own fetch
// loop calls [Consumer.Process] per message.
//
// # Scope
//
// The scope is the consumer identity, held by the guard: [NewGuard] sets an
// empty idem.Options.Scope to the durable consumer's name, qualified by its
// stream because consumer names are unique per stream only
// ("<stream>/<consumer>", [ScopeFor]), and keeps a set one. Two durable
// consumers of one stream then never block each other; several Runs, in
// one process or many, on one durable consumer share its scope and compete
// for its messages.
package natsidem
