// Package natsidem makes NATS JetStream consumers idempotent. Its name
// avoids a clash with nats.go's package nats:
//
//	import natsidem "github.com/idemgo/idem/broker/nats"
//
// A [Consumer] pulls messages from a jetstream.Consumer, runs the user's
// handler under an [idem.Guard] and maps each outcome to a JetStream action
// with [idem.Decide]:
//
//   - processed or duplicate: Ack (DoubleAck with [Options.DoubleAck]), only
//     after the record is durable;
//   - in progress elsewhere, a transient handler error, a store failure:
//     NakWithDelay with the back-off of [Options.Backoff] (redelivered later);
//   - conflict, permanent error, missing or invalid key, parked record:
//     published to [Options.DeadLetterSubject] with the headers Idem-Reason,
//     Idem-Error, Idem-Subject, Idem-Msg-Id, Idem-Stream, Idem-Stream-Seq and
//     Idem-Consumer, then Term. If the dead-letter publish fails the message is
//     not terminated but retried, so nothing is lost. A dead letter carries
//     Nats-Msg-Id "idem-dlq:<stream>:<sequence>", so a repeat after a lost
//     Term is dropped by the dead-letter stream's duplicate window.
//
// Usage, two-phase (the side effect lives outside the store):
//
//	cons, _ := js.Consumer(ctx, "ORDERS", "billing")
//	g, _ := natsidem.NewGuard(store, cons, idem.Options{}) // scope "ORDERS/billing"
//	err := natsidem.Consume(ctx, cons, g, natsidem.Handle(
//		func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
//			return nil, charge(ctx, idem.DeriveKey(ctx, "charge"), msg.Data())
//		}), natsidem.Options{JetStream: js, DeadLetterSubject: "orders.dlq", Concurrency: 8})
//
// With a store that has a transactional inbox (store/sqlite, store/postgres),
// [HandleTx] runs the handler inside the store's transaction together with
// the dedup marker (idem.DoTx):
//
//	h := natsidem.HandleTx(func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) ([]byte, error) {
//		_, err := tx.ExecContext(ctx, `insert into charges(order_id, amount) values (?, ?)`, ...)
//		return nil, err
//	})
//
// [Options.OnResult] sees every message's [Report] (outcome, action, reason,
// broker error) for metrics; the guard's idem.Observer sees the outcomes. A
// program with its own fetch loop calls [Consumer.Process] per message.
//
// # Keys, and which NATS ids survive what
//
// The key comes from the guard's [idem.Options.Key] applied to the
// [idem.Message] built by [MessageOf]: Message.ID is the Nats-Msg-Id header
// (the default extractor, idem.MessageID, uses it), Headers are the NATS
// headers (first value of each), ContentType is the Content-Type header.
// idem.CloudEventsKey reads binary-mode CloudEvents headers (ce-id, ce-source,
// matched case-insensitively) and structured-mode payloads.
//
//   - Nats-Msg-Id is chosen by the producer: it survives producer retries
//     (when the producer reuses it, as [Publish] does) and redelivery. It is
//     the right key.
//   - The stream sequence survives redelivery but not a producer retry: a
//     re-sent message is stored again under a new sequence. Never a key.
//   - The delivery count and the consumer sequence change on every
//     redelivery. Never a key.
//
// # Scope
//
// The guard's scope is the consumer identity and is fixed when the guard is
// made: use the durable consumer's name, qualified by its stream because
// consumer names are unique per stream only. [ScopeFor] returns it and
// [NewGuard] fills it in.
//
// # Producer side
//
// [Publish] sets Nats-Msg-Id, which turns on JetStream's duplicate window for
// the stream (Duplicates, two minutes by default): a producer retry inside
// the window is dropped by the server. That is a complement to consumer-side
// deduplication, never a replacement: the window is minutes long, and a
// redelivery after AckWait (a lost ack, a crashed consumer) is the same stored
// message delivered again, which the window does not cover at all.
package natsidem
