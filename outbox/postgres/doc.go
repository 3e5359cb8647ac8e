// Package outboxpostgres is the transactional outbox on PostgreSQL (pgx v5):
// messages are written in the caller's pgx.Tx, beside the business rows and
// the idem inbox marker, and the relay publishes them.
//
//	import outboxpostgres "github.com/idemgo/idem/outbox/postgres"
//
//	ob, err := outboxpostgres.New(pool, outboxpostgres.Options{})  // table idem_outbox
//	err = ob.Migrate(ctx)                                          // once, at start-up
//	_, err = idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		if _, err := tx.Exec(ctx, `INSERT INTO charges ...`, ...); err != nil {
//			return nil, err
//		}
//		return nil, ob.Enqueue(ctx, tx, outbox.Message{Destination: "billing.charged", Payload: body})
//	})
//
// Enqueue is one statement in the transaction, one round trip; Queue adds
// the same statement to a pgx.Batch of the caller's, at no round trip of its
// own (see outbox/BENCH.md for what each costs).
//
// # Schema
//
// Migrate creates the table (Options.Table, default idem_outbox) and its
// lease table (Table+"_lease"). Rows carry a bigint identity Seq, the unique
// id, the message, the attempts and the publication time. Five indexes keep
// every path of the relay small on a table of 100M rows: the primary key on
// seq, the unique id (an id enqueued twice is one message), the pending rows
// by seq (partial: published rows leave it), the pending rows that failed
// or are parked by ordering key (partial and tiny: what may hold a key
// back), and the published rows by published_at (partial, for cleanup).
//
// # Commit order per ordering key
//
// Enqueue takes pg_advisory_xact_lock on a 32-bit hash of each ordering key
// before the rows get their Seq, in the same statement. A second
// transaction on the same key waits until the first commits or rolls back,
// so per key Seq order is commit order; the relay publishes by Seq. Keys
// whose hashes collide only wait for each other. Messages without a key take
// no lock.
//
// # LISTEN/NOTIFY
//
// Store implements outbox.Notifier: relays LISTEN on the channel
// (Options.Channel, default the table name) and Enqueue's statement sends
// pg_notify, delivered at commit, so a relay wakes as soon as messages
// commit instead of at its next poll. PostgreSQL commits the transactions
// that NOTIFY one at a time (a lock held through the commit's WAL flush), so
// one Store NOTIFYs at most once per Options.NotifyInterval (20 ms), and the
// listener fetches again that long after each notification for the
// transactions that committed without one. Options.NoNotify leaves the
// relays to polling.
//
// # Times
//
// Times are timestamptz, written from the callers' clocks (Options.Clock,
// the relay's RelayOptions.Clock), truncated to microseconds; the server's
// clock is never read.
package outboxpostgres
