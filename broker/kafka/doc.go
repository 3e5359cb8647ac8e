// Package kafka runs an idempotent Kafka consumer on franz-go (kgo): every
// record goes through an idem.Guard, so a record delivered twice (a producer
// re-send, a redelivery after a crash or a rebalance) has its effect once.
//
//	g, _ := idem.New(store, idem.Options{Scope: "billing"}) // idem.New needs a scope; the consumer uses its group
//	cl, _ := kgo.NewClient(kafka.ClientOptions(
//		kgo.SeedBrokers("localhost:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("orders"),
//	)...)
//	defer cl.Close()
//	c, _ := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: "orders.dlq"})
//	err := c.Run(ctx, func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
//		return nil, charge(ctx, idem.DeriveKey(ctx, "charge"), rec.Value)
//	})
//
// When the side effects live in the store's database, RunTx runs the handler
// in the same transaction as the dedup marker (the transactional inbox):
//
//	err := kafka.RunTx(ctx, c, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) ([]byte, error) {
//		_, err := tx.Exec(ctx, `insert into charges(order_id, amount) values ($1, $2)`, ...)
//		return nil, err
//	})
//
// # Keys
//
// Kafka has no message id, and the offset is not one: a producer retry with
// idempotence disabled, or an application that sends the same message again,
// writes it at a new offset. Producers set a stable id in the
// "idempotency-key" header (Record does) and the consumer reads it (the
// default Options.Key). CloudEvents producers set ce_id and ce_source
// (binary mode, WithCloudEvent) or send structured events; consume them with
// Options.Key = idem.CloudEventsKey. A record without a usable key is
// dead-lettered (reason no_key or invalid_key) unless the guard's
// MissingKey policy is idem.MissingKeyProcess.
//
// Keys are stored under Options.Scope, by default the consumer group, so two
// groups reading one topic never block each other. The guard's own Scope and
// Key are not used by the consumer; its Fingerprint, Lease, Retention,
// Stale, MissingKey, MaxResultSize and Observer are.
//
// # Order, retries and commits
//
// Records of one partition are processed one at a time in offset order;
// Options.Concurrency partitions are processed at once. What happens to a
// record follows idem.Decide:
//
//   - processed, duplicate: done.
//   - key in progress at another consumer, transient handler error (the
//     claim is released), store error: the partition is held and the same
//     record tried again after a back-off (Options.RetryMin..RetryMax). It is
//     never skipped; MaxAttempts can bound handler failures.
//   - conflict (same key, other content), idem.Permanent error, missing or
//     invalid key, parked stale record: produced to Options.DeadLetterTopic
//     with headers idem-reason, idem-error and idem-original-topic,
//     -partition and -offset, then done once the broker acknowledges it
//     (Options.OnDeadLetter is called then: alert on conflicts there).
//
// An offset is committed only when its record and every record before it in
// the partition are done: every CommitInterval, when partitions are revoked,
// and on shutdown. A crash between processing and committing redelivers the
// records after the last commit; the store skips those already done.
//
// # Rebalances and shutdown
//
// Build the client with ClientOptions: it disables autocommit, blocks
// rebalances while polled records are handed to partition workers and while
// offsets are committed (kgo.BlockRebalanceOnPoll), and installs the
// rebalance hooks. On a revoke, in-flight records finish (up to
// DrainTimeout, then their context is cancelled and their claims released),
// done offsets are committed, and queued records are dropped for the new
// owner. On a loss (the session expired), in-flight handlers are cancelled
// and nothing is committed; the store's fencing token keeps a late handler
// from completing over the new owner.
//
// Run returns when its context ends: it stops fetching, lets in-flight
// handlers finish or releases them, and commits. It does not close the
// client: close it after Run returns (closing leaves the group).
//
// # Producing
//
// Record builds a record with the idempotency-key header. Keep the
// producer's own idempotence on (the kgo default): it stops the broker from
// writing a retried batch twice within one producer session. It is a
// complement, not a replacement: it does not survive a producer restart and
// does not know that an application sent the same message twice.
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
// Each record is claimed when its turn comes, also with an idem.BatchStore.
// Claiming a poll batch ahead would need a guard call that runs a handler
// under a claim taken by the caller (heartbeat, complete, release, events),
// which the guard does not offer; and it would start the leases of records
// that still wait behind earlier ones of their partition.
package kafka
