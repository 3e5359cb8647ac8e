// Package postgres is an idem store on PostgreSQL (pgx/v5): two-phase
// records with leases and fencing tokens, a transactional inbox on pgx.Tx,
// batch claims in one statement, and a sweeper safe to run from every
// instance. It implements idem.Store, storekit.BatchStore, idem.Inspector and
// idem.TxStore[pgx.Tx].
//
// The guide, with the schema, sizing, the sweep and what each statement does:
// https://github.com/idemgo/idem/blob/main/docs/stores/postgres.md
//
// # Usage
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	store, err := postgres.New(pool, postgres.Options{Table: "idem_records"})
//	if err != nil { ... }                      // a bad table name: postgres.ErrInvalidTable
//	if err := store.Migrate(ctx); err != nil { ... } // idempotent; safe from every instance
//	g, err := idem.New(store, idem.Options{Scope: "billing"})
//
//	// Transactional inbox: the marker commits with the business writes.
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
//		_, err := tx.Exec(ctx, `INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, id, amount)
//		return nil, err
//	})
//
//	// Two-phase, for side effects outside the database.
//	res, err = g.Do(ctx, msg, sendMail)
//
//	// One sweeper per process; instances take turns through an advisory lock.
//	go (&idem.Sweeper{Store: store}).Run(ctx)
//
// A poll of many messages (a Kafka batch) can be claimed with one statement
// (ClaimBatch), or marked inside one transaction with its business writes
// (MarkBatch). New keys are settled first by an insert alone; when the
// batch's requests share their scope and times, as a poll claimed at one
// instant does (idem.Guard.ClaimBatch), those go once as scalars and only
// ids and fingerprints as arrays, which measured a third or more faster
// than an array per field. ClaimBatch, which runs outside any caller's
// transaction, tries a plain INSERT first (no ON CONFLICT): a poll of new
// keys is then the cheapest statement there is, and a key that exists fails
// that statement alone with a unique violation (one ERROR line in the
// server's log), after which the batch takes the ON CONFLICT path and the
// store does not try the plain insert for its next 32 batches. Keys that
// exist go through the full statement.
//
// # Statements
//
// A claim is one statement of three branches over the same snapshot: an
// INSERT .. ON CONFLICT (scope, id) DO NOTHING for a new key, an UPDATE that
// takes an existing row when it is acquirable (retention ended, released,
// or lease ended with TakeOverStale), and otherwise a read of the existing
// row. A duplicate therefore costs a few index lookups: no row lock, no WAL, no
// transaction id. No branch can raise a unique violation, so Mark is safe
// inside the caller's transaction (PostgreSQL aborts a transaction on a
// violation). When the conflicting row was committed by a concurrent claim
// after the statement took its snapshot, none of the branches sees it; the
// statement then runs again, and only then. Keys a batch finds existing go
// through one INSERT .. ON CONFLICT DO UPDATE .. WHERE <acquirable> in key
// order, which locks each existing row (taken or not) as it passes, so
// every batch locks its keys in one global order and overlapping batches
// cannot deadlock; a duplicate in a batch costs that row lock. Complete,
// Release and Renew are single UPDATEs fenced by WHERE state = in_progress
// AND token = $token; no row updated means idem.ErrLeaseLost. On a server
// whose default isolation is REPEATABLE READ these statements fail with a
// serialization failure when a row changed after their snapshot: the store
// runs them again, and after a batch's first such failure runs its batches'
// upserts in READ COMMITTED transactions of their own.
//
// # Errors
//
// Options errors wrap ErrInvalidTable (table names) and
// idem.ErrInvalidOptions. A data exception from the server (SQLSTATE class
// 22, such as a time past timestamptz's range) is an *idem.InvalidDataError
// naming the operation: permanent, so the message is dead-lettered rather
// than redelivered forever. Everything else the database or the network
// returns is wrapped with the operation's name ("postgres: claim: ...");
// the guard reports it as *idem.StoreError, which idem.Decide retries, so a
// message is never acked while its record is not durable. Either way the
// driver's error stays reachable (*pgconn.PgError, net errors, context
// errors).
package postgres
