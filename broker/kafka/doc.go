// Package kafka makes Kafka consumers on franz-go (kgo) idempotent: a
// record delivered twice (a producer re-send, a redelivery after a crash or
// a rebalance) has its effect once.
//
// A [Consumer] consumes a group's partitions, runs the user's [Handler]
// under an [idem.Guard] and maps each outcome to a Kafka action with
// [broker.Decide]. Records of one partition are processed one at a time in
// offset order; [broker.Options].Concurrency partitions are processed at once. It
// has the shape every idem broker adapter has (see package
// github.com/idemgo/idem/broker): [NewGuard], [Handle] or [HandleTx],
// [NewConsumer] and [Consumer.Run] (or [Consume]), [MessageOf], one
// [broker.Report] per attempt passed to the hooks ([broker.Options].Hooks),
// [DeadLetterOf] and [Replay] for dead letters, and [Publish] (or
// [Record]) on the producer side; Publish sets no broker dedup id, because
// Kafka has none: the idempotent producer drops a session's retried
// batches by sequence number, not by an id. Kafka adds [HandleCheckpoint]:
// the partition's position kept in the business database (see the guide's
// Stream checkpoints, and ExampleHandleCheckpoint).
//
//   - processed or duplicate: the record is done, and its offset becomes
//     committable only after the store's record is durable;
//   - in progress elsewhere (another consumer holds the key's lease: a
//     producer re-send arriving while the original's handler runs
//     elsewhere, or a claim orphaned by a consumer that crashed): the
//     partition is held, nothing after the record runs or is committed,
//     and the record is claimed again on the back-off, at most a second
//     apart and at the latest when the holder's lease ends (the engine's
//     hold, broker.Options.MaxHold). The claim then finds the key
//     completed (a duplicate: done), given back by a holder whose handler
//     failed (processed here, within a second), renewed by a live holder
//     (held on) or orphaned (its lease ran out: reconciled, parked or
//     retaken, by the guard's Stale policy). Past MaxHold the record waits
//     out the holder's lease before its next claim;
//   - a store that cannot be reached (down, restarting): the partition is
//     held and the record claimed again on the back-off until the store
//     answers; it is no failure and is reported to the guard's observer as
//     an idem.Outage at most every ten seconds;
//   - a transient handler error (the claim is released): the partition is
//     held and the same record tried again after the back-off
//     (broker.Options.Backoff). It is never skipped; MaxDeliveries can
//     bound handler failures (reason max_deliver, broker.ReasonMaxDeliver);
//   - conflict, permanent error, missing or invalid key, parked record:
//     produced to [Options.DeadLetterTopic] (see the guide's Dead letters), then
//     done once the broker acknowledges it. If the produce fails the record
//     is held and retried, so nothing is lost.
//
// Usage, two-phase (the side effect lives outside the store):
//
//	cl, _ := kgo.NewClient(kafka.ClientOptions(
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	)...)
//	defer cl.Close()
//	g, _ := kafka.NewGuard(store, cl, idem.Options{}) // scope: the group, "billing"
//	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
//		return nil, charge(ctx, idem.DeriveKey(ctx, "charge"), rec.Value)
//	})
//	c, _ := kafka.NewConsumer(cl, g, h, kafka.Options{DeadLetterTopic: "orders.dlq"})
//	err := c.Run(ctx)
//
// With a store that has a transactional inbox (store/sqlite,
// store/postgres, store/mysql), [HandleTx] runs the handler inside the
// store's transaction together with the dedup marker (idem.DoTx):
//
//	h := kafka.HandleTx(func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) ([]byte, error) {
//		_, err := tx.Exec(ctx, `insert into charges(order_id, amount) values ($1, $2)`, ...)
//		return nil, err
//	})
//	err := kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: "orders.dlq"})
//
// NewConsumer checks everything once: the client's settings, the options,
// and that a HandleTx handler's store has transactions of its type.
//
// The guide, with keys, commits, rebalances, clusters, dead letters, the
// producer side, Event Hubs, batch claims and stream checkpoints in depth:
// https://github.com/idemgo/idem/blob/main/docs/brokers/kafka.md
//
// # Hooks
//
// Each attempt at a record yields one [broker.Report] (the guard's result
// and error, the action, the dead-letter reason, the retry delay, the
// attempt number), passed to [broker.Options].Hooks: BeforeSettle once the
// outcome is known and before anything is settled (before the record
// counts as done, so before its offset can be committed; before its dead
// letter is produced; before the partition is held for a retry): the
// worst moment to crash, and the place for work that must happen first;
// OnDeadLetter once a dead letter is acknowledged (alert on conflicts
// there); AfterSettle after the action, with BrokerErr set when a
// dead-letter produce failed. The guard's idem.Observer sees every
// record's outcome and settle, and the errors the consumer handles by
// itself (failed commits, dead-letter produces, batch claims, fetches:
// idem.ErrorObserver).
//
// # Scope
//
// The scope is the consumer identity, held by the guard: [NewGuard] sets an
// empty idem.Options.Scope to the consumer group, so two groups reading one
// topic never block each other, and keeps a set one. The consumer uses the
// guard as it is given; [Consumer.Scope] returns its scope.
//
// # Replaying dead letters
//
// [Replay] sends a dead letter back to its Idem-Original-Topic with its
// key, value and original headers exactly as they were (the
// idempotency-key among them), without the headers idem added. The
// consumer's record then decides, as for any redelivery: a key completed
// meanwhile is a duplicate (acknowledged, the handler does not run), a key
// never completed is processed, a conflict is dead-lettered again. Replays
// often come long after the redelivery window: the guard's Retention must
// outlive the longest time a dead letter may wait before it is replayed,
// or a replay of a processed record runs again.
package kafka
