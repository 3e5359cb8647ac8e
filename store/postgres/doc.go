// Package postgres is an idem store on PostgreSQL (pgx/v5): two-phase
// records with leases and fencing tokens, a transactional inbox on pgx.Tx,
// batch claims in one statement, and a sweeper safe to run from every
// instance. It implements idem.Store, storekit.BatchStore, idem.Inspector and
// idem.TxStore[pgx.Tx].
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
// # Record rules
//
// Every request goes through storekit's Prepare functions first (Claim, ClaimBatch and
// MarkBatch for each request, Mark, DeferMark, Complete, Renew): a request
// without its times is an *idem.InvalidDataError and nothing is sent (no
// record is written with a zero expiry), a fingerprint that is not short
// text (raw digest bytes, NUL bytes, invalid UTF-8) is stored as its
// "sha256:" digest, and ExpiresAt is raised to LeaseUntil.
//
//   - Tokens: a row the statement inserts takes the request's NewToken, a
//     random number in [2^32, 2^52) that Prepare draws (a batch sends one
//     per row), never 1; a row that exists, expired or released or retaken,
//     counts on from its own token. So after a sweep deletes a key's row,
//     its next owner's token matches no zombie of the earlier lifetime.
//   - Lifetime: only a settled row expires: completed or released with
//     expires_at <= now, in the claim, the marker, the batch statements,
//     Sweep and Stats alike. An in-progress row past its lease is stale,
//     however old: claims report it to the Stale policy (stale, or a retake
//     with take_over), Sweep leaves it, Stats counts it stale. Renew sets
//     lease_until and expires_at = GREATEST(expires_at, lease_until).
//   - Content: a released row keeps its fingerprint (it takes the request's
//     only when it has none), a stale retake keeps it, and only an expired
//     row, a new lifetime, takes the request's.
//   - One clock: every time compared comes from the request (the caller's
//     clock); no statement reads now() for a record's state.
//
// Two transactions marking one key: the second one's INSERT waits for the
// first transaction to end. If it commits, the second sees its marker
// (ClaimDuplicate) and skips its business writes; if it rolls back, the
// second writes the marker. Exactly one set of business writes commits. The
// inbox needs READ COMMITTED (InTx asks for it whatever the server's
// default); in a caller's own REPEATABLE READ transaction the second one
// gets a serialization failure, which is retryable. Claims outside a
// transaction re-run on serialization failures and deadlocks themselves.
//
// Mark sends the insert branch alone first: a new key, the common case,
// costs one INSERT .. ON CONFLICT DO NOTHING of the marker row, which returns
// nothing (the affected-row count says it was inserted, and the record is the
// one the request describes). When the key exists, Mark reads its record (a
// second round trip, on the path of duplicates) and applies the record rules
// to it: a duplicate, a conflict or a live owner is settled by that read,
// and only a record to take over (expired, released) runs the full
// statement. A key the store marked lately (it remembers the last few ten
// thousand, in 256 KiB) is most likely a redelivery: its marker is the
// insert that, inserting nothing, reads the record in the same statement,
// one round trip for the duplicate at about a fifth more server time had it
// been new. So is every marker while more than a quarter of the store's
// recent markers of other keys met recorded ones (a consumer restarting
// from an old offset). InTx sends its BEGIN in one batch with the
// transaction's first statement (pgx's Batch.BeginTx); in idem.DoTx that is
// the marker, so the inbox adds one statement and no round trip to the
// business transaction.
//
// Options.MarkWithFirstStatement goes one round trip further: DoTx's marker
// is sent in the same batch as BEGIN and the handler's first statement, so
// a new key's transaction costs two round trips where pgx.BeginFunc with
// the insert alone takes three. The handler then starts before the marker's
// answer: for a key already recorded its first statement fails with an
// error wrapping ErrRerun, nothing commits, and DoTx runs the transaction
// again, where the marker reads the record without trying the insert.
// Handlers must tolerate running up to their first statement for a message
// they then do not process (decoding is fine, a call to another service is
// not); that is why it is not the default. Only the markers of keys guessed
// new are deferred: a key the store marked lately, or any key while
// recorded ones are common (above), has its marker sent first, and its
// handler never starts.
//
// # Schema (designed for 100M rows)
//
// Migrate creates Table, an index and Table+"_migrations" (applied versions),
// in one transaction under an advisory lock, so concurrent instances migrate
// once. The table:
//
//   - PRIMARY KEY (scope, id), both text COLLATE "C": ids are opaque, bytewise
//     comparison is the cheapest, and it is the order List pages in. Ids over
//     200 bytes are stored as their sha256 (idem.Key.StoredID), so the key stays
//     small; the original is kept in display_id (NULL when equal to id).
//   - state as a smallint (1 in_progress, 2 completed, 3 released), times as
//     timestamptz, result as bytea, fixed-size columns first (no padding).
//     No CHECK constraint (migration 002 drops the one 001 made): PostgreSQL
//     rebuilds a CHECK's expression from its text in every statement that
//     writes a row, which cost the inbox 3 to 5 points of its rate.
//   - one secondary index, on sweep_at: the claim's expires_at rounded down
//     to the second, never later than the row's expires_at.
//
// Why sweep_at and not expires_at: every two-phase record is inserted by its
// claim and updated once by its complete, which moves expires_at by the
// handler's duration (and renewals may carry it further). An update that
// changes no indexed column can be HOT: the new version goes on the same
// heap page and no index gets a new entry, so neither the primary key nor
// the sweep index grows with the update rate and the dead version is pruned
// without VACUUM. An index on expires_at would make every complete a
// non-HOT update; a complete or renewal leaves sweep_at as it is while the
// new expires_at is at most a minute past it, and moves it otherwise (or
// when the retention shrinks), so sweep_at <= expires_at always. The sweep
// finds rows through sweep_at <= now and checks expires_at on each, so a
// row goes as soon as it expired; the rows it finds that have not expired
// yet are those whose retention ends within the minute, and only the last,
// short batch of a round reaches them. Rounding to the second lets the
// B-tree deduplicate: a second's rows share one posting list (rows written
// by older versions have sweep_at rounded up to the minute and are swept up
// to a minute after they expire).
//
// Why a B-tree and not BRIN: BRIN is tiny, but its ranges only widen. Once
// sweeps free space in old pages, new rows with late expiry land there, the
// ranges cover everything, and each sweep reads most of the table. (And on
// PostgreSQL before 16 a BRIN index blocks HOT updates just as a B-tree does.)
//
// Fillfactor (Options.FillFactor, default 80): HOT needs free space on the
// page for the new version. Rows are inserted at the claim and completed
// right after, so pages fill by inserts and are then updated; at 100% fill
// every complete would move its row to another page. 80% leaves room for the
// completes of the page's rows (a result of a few hundred bytes included;
// larger results are TOASTed). autovacuum_vacuum_scale_factor is set to 0.02
// so dead rows from sweeps are vacuumed after 2% of the table, not 20%.
//
// # Cleanup: sweeping, and why not time partitions
//
// Sweep deletes at most Limit expired rows per statement (none, without a
// round trip, when Limit <= 0), oldest sweep_at first, never an in-progress
// row whose lease is live, with FOR UPDATE SKIP LOCKED (it never waits for a
// claim, and a claim waits at most for one batch) under
// pg_try_advisory_xact_lock (one instance sweeps a table at a time; the
// others get 0 at once). idem.Sweeper repeats it until a batch comes back
// short.
//
// Dropping whole partitions is the cheapest cleanup PostgreSQL has (no dead
// rows, no VACUUM, no index bloat), and it is the right tool for append-only
// data. It does not fit a dedup table partitioned by expires_at or
// created_at: PostgreSQL enforces a primary key on a partitioned table only
// within each partition, so the key must include the partition column. With
// PRIMARY KEY (scope, id, created_at), a redelivery arriving in a later
// partition is not a conflict and would be processed twice, which is the one
// thing this table exists to prevent; and expires_at changes on complete, so
// a row would have to move between partitions, which INSERT .. ON CONFLICT
// cannot do. Partitioning by time is only sound when the time is part of the
// key itself: if every message carries an immutable event date and all its
// redeliveries carry the same one, put the date in the id's scope (Scope
// "billing-2030-01-02") and keep one table per period, dropping old tables
// whole; idem cannot derive that date for you.
//
// What the store does offer for very large tables is hash partitioning
// (Options.Partitions = N, for example 16): PARTITION BY HASH (scope, id)
// keeps the primary key global (the partition key is the primary key), so
// every statement is unchanged, while each partition is vacuumed, indexed
// and swept in 1/N-sized pieces, and autovacuum works on several of them in
// parallel. With the sweep index, HOT completes and a steady sweeper, a
// 100M-row table stays at its retention window's size without bloat.
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
//
// # Performance
//
// BENCH.md in this directory has the figures measured on a local server
// (transactional inbox against a raw insert, two-phase claim+complete, batch
// claims, sweeping while claiming), with the command that produced them:
//
//	go test -run '^$' -bench Ratios -benchtime=10x -count 3 ./store/postgres/
//
// On a quiet 2-core machine that client and server share, 8 workers: the
// inbox (marker plus one business insert per transaction) ran at 0.75–0.78
// × the rate of the insert alone in one session and 0.77–0.85 in a later
// one, the same transaction written by hand with pgx at 0.79–0.81; the
// marker is a fourth statement where the insert alone has three, and even a
// 2-column marker cost 0.12–0.14 there. With MarkWithFirstStatement the
// inbox ran at 0.91–1.01 × the insert alone. Against an inbox written by
// hand with pgx (BenchmarkInboxVsHandWritten, 10% redeliveries, a loaded
// machine): 0.95 (median of six runs) and, with MarkWithFirstStatement,
// 1.12. Two-phase
// claim+complete 0.47–0.54. Batch claims of 100 keys 173–189k keys/s, of
// 1000 keys 246–251k. A sweep of 1M expired rows at full speed raised the
// claimers' p99 latency 2.2–2.7 times.
package postgres
