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
//	c, _ := natsidem.NewConsumer(cons, g, h, natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq", Options: natsidem.ConsumerOptions{Concurrency: 8}})
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
// # Keys, and which NATS ids survive what
//
// The guard is the one place for the key, as for the scope: its key
// function ([idem.Options.Key]) is applied to the [idem.Message] built by
// [MessageOf]: Message.ID is the Idem-Id header set
// by [Publish], else the Nats-Msg-Id header (the default extractor,
// idem.MessageID, uses it), Headers are the NATS headers (first value of
// each), ContentType is the Content-Type header. idem.CloudEventsKey reads
// binary-mode CloudEvents headers (ce-id, ce-source, matched
// case-insensitively) and structured-mode payloads.
//
//   - Nats-Msg-Id is chosen by the producer: it survives producer retries
//     (when the producer reuses it) and redelivery. It is the right key. A
//     message sent by [Publish] has the dedup id there (see below), and its
//     plain id in Idem-Id, which MessageOf reads first and shows under
//     Nats-Msg-Id too.
//   - The stream sequence survives redelivery but not a producer retry: a
//     re-sent message is stored again under a new sequence. Never a key.
//   - The delivery count and the consumer sequence change on every
//     redelivery. Never a key.
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
//
// # Dead letters
//
// A dead letter is the original's data and headers with what an operator
// needs to decide, in headers:
//
//   - why: Idem-Reason (conflict, no_key, invalid_key, parked,
//     invalid_data, permanent, max_deliver), Idem-Error, Idem-Key (the
//     scope/id);
//   - which content holds the key: Idem-Fingerprint (this message's)
//     beside Idem-Stored-Fingerprint, Idem-Stored-State,
//     Idem-Stored-Created-At (when the key was first claimed),
//     Idem-Stored-Token and Idem-Stored-Attempts, for a conflict or a
//     parked record (see [idem.DeadLetterHeaders]);
//   - where from: Idem-Subject, Idem-Stream, Idem-Stream-Seq (the stream
//     sequence), Idem-Original-Timestamp (when the stream stored it),
//     Idem-Deliveries and Idem-Consumer.
//
// A conflict whose Idem-Stored-Created-At is after this message's
// Idem-Original-Timestamp means the key's content was first claimed when
// this message was already stored: after crashes, a later content can win
// the key and the original is the one dead-lettered. One whose stored
// record is older is a plain reuse of the id.
//
// The original's headers travel as they were, under their own names,
// except JetStream's control headers (Nats-Msg-Id, Nats-Expected-*, ...),
// which would act on the dead-letter stream: they travel prefixed with
// Idem-Original- (the original Nats-Msg-Id is Idem-Original-Nats-Msg-Id,
// and Idem-Msg-Id too). Idem-Id, the plain id set by [Publish], travels as
// it was. A dead letter's own Nats-Msg-Id is
// "idem-dlq:<stream>/<consumer>:<sequence>", so a repeat after a lost Term
// is dropped by the dead-letter stream's duplicate window.
//
// # Replaying dead letters
//
// [Replay] publishes a dead letter back to its Idem-Subject with its data
// and the original's headers (Idem-Id among its own), without the headers
// idem added, and with a Nats-Msg-Id of its own: the original's (from
// Idem-Original-Nats-Msg-Id), "~replay-" and a random nonce. The stream's
// duplicate window remembers the original's Nats-Msg-Id and would drop a
// replay that carried it, for as long as the window lasts (a day, on a
// stream with a 24-hour window); the consumer deduplicates by the key, and
// [MessageOf] reads a replay's Nats-Msg-Id as the original's, so a replay
// is never dropped by the window and the guard sees it as it saw the
// original. The consumer's record then decides, as for any redelivery: a
// key completed meanwhile is a duplicate (acknowledged, the handler does
// not run), a key never completed is processed, a conflict is
// dead-lettered again. Replays often come long after the redelivery
// window: the guard's Retention must outlive the longest time a dead letter
// may wait before it is replayed, or a replay of a processed message runs
// again.
//
// # On a cluster
//
// TestClusterNodeKilled (in broker/nats/internal/integration) runs the
// effectively-once cases of broker/brokertest on a three-node JetStream
// cluster that the test starts itself: three nats-server processes on private ports and directories,
// routed to each other, streams (the input and the dead letters) replicated
// on all three in files, and each consumer connected to a different node
// first, with every node's URL to reconnect to. A quarter of the way
// through each case the node leading the durable consumer is SIGKILLed; it
// is restarted halfway through. Every unique message is still applied
// once, every reused id dead-lettered once as a conflict, none lost; the
// restarted node catches up (every replica current) and the clients that
// were on it reconnect to the survivors. It runs in the default test run
// (about 30 s; skipped without nats-server on PATH, failed under
// IDEM_REQUIRE_SERVICES=1):
//
//	go test -run TestClusterNodeKilled ./broker/nats/internal/integration/
//
// # Producer side
//
// [Publish] sets Nats-Msg-Id, which turns on JetStream's duplicate window for
// the stream (Duplicates, two minutes by default): a producer retry inside
// the window is dropped by the server. The window must never drop a
// conflict, so Nats-Msg-Id is [idem.DedupID] of the id and the content's
// fingerprint ([idem.PayloadFingerprint], or the consumers' FingerprintFunc
// given with [WithFingerprint]): retries of the same content collapse, an
// id reused with other content is stored and reaches the consumer, which
// dead-letters it as a conflict. The plain id travels in Idem-Id.
// Consumers of messages sent by Publish read it by default; upgrade
// consumers before producers, as an older consumer would key on the dedup
// id.
//
// The window is a complement to consumer-side deduplication, never a
// replacement: it is minutes long, and a redelivery after AckWait (a lost
// ack, a crashed consumer) is the same stored message delivered again,
// which the window does not cover at all.
package natsidem
