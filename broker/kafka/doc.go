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
// the partition's position kept in the business database (see Stream
// checkpoints below).
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
//     produced to [Options.DeadLetterTopic] (see Dead letters below), then
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
// # Keys, and which Kafka values survive what
//
// The guard is the one place for the key, as for the scope: its key
// function (idem.Options.Key) is applied to the [idem.Message] built by
// [MessageOf]: ID is the idempotency-key header ([DefaultKeyHeader]), so
// the default key, idem.MessageID, reads it; Headers are the record
// headers (first value of each); ContentType is the content-type header.
// idem.CloudEventsKey reads binary-mode CloudEvents headers (ce_id,
// ce_source; [WithCloudEvent] sets them) and structured-mode payloads;
// idem.JSONFieldsKey a business key; idem.FirstOf combines them. Kafka has
// no correlation id of its own: Message.CorrelationID stays empty, and the
// guard's default correlation reads the producer's W3C traceparent header.
//
//   - The idempotency-key header is chosen by the producer: it survives
//     producer retries (when the producer reuses it, as [Record] does) and
//     redelivery. It is the right key.
//   - The offset survives redelivery but not a producer retry: with
//     idempotence disabled, or an application sending the same message
//     again, the message is written at a new offset. Never a key.
//   - The record's Kafka key partitions and orders records; many messages
//     share it. Never an idempotency key on its own.
//
// A record without a key is dead-lettered (reason no_key; an unusable one,
// invalid_key) unless the guard's MissingKey policy is
// idem.MissingKeyProcess, which runs the handler without dedup.
//
// # Scope
//
// The scope is the consumer identity, held by the guard: [NewGuard] sets an
// empty idem.Options.Scope to the consumer group, so two groups reading one
// topic never block each other, and keeps a set one. The consumer uses the
// guard as it is given; [Consumer.Scope] returns its scope.
//
// # Commits
//
// An offset is committed only when its record and every record before it in
// the partition are done: every CommitInterval, when partitions are revoked,
// and on shutdown. A crash between processing and committing redelivers the
// records after the last commit; the store skips those already done. (With
// [HandleCheckpoint] the consumer resumes from the position in the
// database instead, and the committed offset is for monitoring.)
//
// # Rebalances and shutdown
//
// Build the client with ClientOptions: it disables autocommit, blocks
// rebalances while polled records are handed to partition workers and while
// offsets are committed (kgo.BlockRebalanceOnPoll), and installs the
// rebalance hooks; such a client is for a Consumer only (one with none
// built on it within ConsumerWait of its assignment reports ErrNoConsumer
// in its polls). On a revoke, in-flight records finish (up to
// ShutdownTimeout, then their context is cancelled and their claims released),
// done offsets are committed, and queued records are dropped for the new
// owner. On a loss (the session expired), in-flight handlers are cancelled
// and nothing is committed; the store's fencing token keeps a late handler
// from completing over the new owner.
//
// Run returns when its context ends: it stops fetching, lets in-flight
// handlers finish or releases them, and commits. It does not close the
// client: close it after Run returns (closing leaves the group).
//
// # On a cluster
//
// TestClusterLeadershipMoves runs the effectively-once cases of
// broker/brokertest on a kfake cluster of three brokers while partition
// leadership moves: 25 times per case, spread over the run, a partition of
// the topic or of the dead-letter topic gets a new leader (the old one
// answers NOT_LEADER_FOR_PARTITION), every fifth time with the group
// coordinators moved too, and a consumer joins the group and leaves it
// again in the middle (two rebalances during the moves). Every unique
// message is still applied once, every reused id dead-lettered once as a
// conflict, none lost. It runs in the default test run (about 6 s):
//
//	go test -run TestClusterLeadershipMoves ./broker/kafka/internal/integration/
//
// The clients there do not validate positions against leader epochs
// (KIP-320, which kfake answers wrongly after a move without writes, making
// kgo read whole partitions again); where a reset does re-read records, the
// guard keeps every effect once, but a conflict read again is
// dead-lettered again.
//
// # Dead letters
//
// A dead letter keeps the original record's Kafka key and value. Its
// headers are, in this order:
//
//   - idem.DeadLetterHeaders: Idem-Reason (conflict, permanent, no_key,
//     invalid_key, parked, invalid_data, max_deliver), Idem-Error,
//     Idem-Key (scope/id), and for a conflict or a parked record
//     Idem-Fingerprint (this record's) beside the stored record's
//     Idem-Stored-Fingerprint, Idem-Stored-State, Idem-Stored-Created-At
//     (the key's first claim), Idem-Stored-Attempts and Idem-Stored-Token;
//   - where it came from: Idem-Original-Topic, Idem-Original-Partition,
//     Idem-Original-Offset and Idem-Original-Timestamp (the record's
//     timestamp; the dead letter gets a timestamp of its own, so that the
//     dead-letter topic's retention counts from the dead-lettering);
//   - the original record's headers exactly as they were, in their order,
//     repeats included (idempotency-key among them).
//
// Read the first value of a header ([MessageOf] does): a record that
// already carried idem headers when it was dead-lettered keeps them among
// its original ones, after the new.
//
// The headers alone tell an operator what happened. A conflict whose
// Idem-Stored-Fingerprint differs from its Idem-Fingerprint says another
// content holds the key; after crashes and redeliveries that content can be
// a later one (commit order is per partition, and a re-send can land on
// another partition or be processed by another consumer first): compare
// Idem-Stored-Created-At, when the key was first claimed, with this
// record's Idem-Original-Timestamp and offset to see which came first.
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
//
// # Producer side
//
// Record builds a record with the idempotency-key header: the plain message
// id the consumer's default key reads. Keep the producer's own idempotence
// on (the kgo default): it stops the broker from writing a retried batch
// twice within one producer session. It is a complement, not a
// replacement: it does not survive a producer restart and does not know
// that an application sent the same message twice.
//
// Kafka has no broker-side dedup by message id or content: the idempotent
// producer dedups by producer id and sequence number only, so a record that
// reuses an id with other content is always written and always reaches the
// consumer, which dead-letters it as a conflict. No broker dedup id is
// derived (idem.DedupID is for brokers that dedup on an id, as JetStream
// and Service Bus do); nothing a producer helper here sets can make the
// broker drop a conflict.
//
// # Azure Event Hubs
//
// Event Hubs speaks the Kafka protocol on port 9093 with SASL PLAIN over
// TLS, the literal user "$ConnectionString" and the namespace's connection
// string as password; an event hub is a topic. This consumer works
// unchanged:
//
//	cl, err := kgo.NewClient(kafka.ClientOptions(
//		kgo.SeedBrokers("NAMESPACE.servicebus.windows.net:9093"),
//		kgo.DialTLS(), // TLS 1.2 or later
//		kgo.SASL(plain.Auth{User: "$ConnectionString", Pass: connString}.AsMechanism()),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"), // the event hub
//	)...)
//
// (plain is github.com/twmb/franz-go/pkg/sasl/plain.) Create the dead-letter
// event hub beforehand, with the retention you want, rather than rely on
// topic auto-creation. Kafka
// headers carry the idempotency key there as anywhere else. Should the
// namespace reject idempotent produce requests, set
// kgo.DisableIdempotentWrite on the producer: the consumer's dedup covers the
// resulting duplicates.
//
// # Batch claims
//
// With a store that claims many keys in one round trip (an
// storekit.BatchStore: the memory, PostgreSQL, MySQL, Redis and SQLite stores)
// and a [Handle] handler, Run claims a partition's queued records
// together, from the head of its queue on and up to [Options.MaxClaimBatch]
// (default MaxPollRecords): one round trip per partition batch instead of
// one per record (idem.Guard.ClaimBatch). The records still run one at a
// time in offset order, each under the claim made for it (renewed first if
// it aged by a third of its lease while waiting), and each outcome is
// decided as above; a key repeated inside the batch is reported as the
// duplicate it is. When a record is held for a retry, the unrun claims
// behind it are released, so they neither run ahead of it nor keep their
// keys; the held record is then claimed on its own, and the records after
// it in a new batch once it is done. Revokes, losses and shutdown release
// the unrun claims too.
//
// [HandleTx] handlers and stores without batch claims claim each record in
// its turn: the transactional inbox marks a key inside the record's own
// transaction, which cannot be taken ahead. MaxClaimBatch 1 does the same
// for Handle.
//
// # Stream checkpoints
//
// [HandleCheckpoint] keeps the consumer's position in the business
// database: one row per (scope, topic, partition) in [Checkpoints].Table,
// moved past each record in the transaction of the record's effects, and
// read when a partition is assigned, to start it there (through the
// kgo.AdjustFetchOffsetsFn that ClientOptions installs). One row per
// partition instead of one record per message: the lightest exactly-once
// for a stream with one writer per partition.
//
//	cp := kafka.Checkpoints{Table: "ledger_checkpoints"}
//	err := cp.Migrate(ctx, store) // store/postgres here; store/sqlite and store/mysql take *sql.Tx
//	h := kafka.HandleCheckpoint(cp, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
//		_, err := tx.Exec(ctx, `update balances set cents = cents + $1 where account = $2`, rec.Value, rec.Key)
//		return err
//	})
//	err = kafka.Consume(ctx, cl, g, h, kafka.Options{DeadLetterTopic: "ledger.dlq"})
//
// What it covers, and what it does not:
//
//   - Redelivery of a record: a crash between the database commit and the
//     offset commit, a rebalance, a group offset lost (expired, reset) or
//     never committed. The stored position says the record's effects
//     committed; the partition resumes after it, and a record fetched
//     below it anyway is reported as a duplicate before fn runs. Both
//     modes.
//   - A former owner still running a record (it lost the partition without
//     noticing): the position's statement comes first in the transaction
//     and locks the row, so the later of two transactions waits, finds the
//     position moved, and rolls back before fn runs. Exactly once holds,
//     and fn runs once per record, even with two writers on a partition
//     (two groups sharing a scope); Kafka's group gives one.
//   - A message the producer wrote twice (an application re-send, a retry
//     without the idempotent producer, a replayed dead letter): two records
//     at two offsets. By default each record's key is marked in the same
//     transaction too (idem.DoTx, as [HandleTx]): the second is a
//     duplicate, within the guard's Retention, at the cost of one idem
//     record per message. With [Checkpoints].NoKeys it is applied twice:
//     choose NoKeys when the stream cannot repeat a message (one producer
//     with kgo's idempotent writes, which dedup its retries within a
//     producer session; change data capture), or when fn is idempotent
//     by itself (an upsert by business id). NoKeys needs no key on the
//     records.
//   - Effects outside tx (a call to another service) are not covered: only
//     what fn writes through tx commits with the position. Use [Handle] and
//     a derived key for those.
//   - A dead-lettered record is done: the position moves past it once the
//     dead letter is acknowledged (a crash in between dead-letters it again
//     on restart, as for every dead letter).
//
// The stored position wins over the group's committed offset: to replay or
// skip, update the row's next_offset (or delete the row to start from the
// group's offset, or kgo.ConsumeResetOffset). A position the log no longer
// holds (retention, a recreated topic) is reset by kgo.ConsumeResetOffset.
// With keys marked, the guard's Observer sees each record as for
// [HandleTx]; with NoKeys there is no key, and only [broker.Options].Hooks see the
// records' reports.
package kafka
