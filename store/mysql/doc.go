// Package mysql is an idem store on MariaDB and MySQL (InnoDB) through
// database/sql and github.com/go-sql-driver/mysql. It implements idem.Store
// (two-phase records: leased, fenced claims), storekit.BatchStore,
// idem.Inspector and idem.TxStore[*sql.Tx] (the transactional inbox: the
// dedup marker is written in the caller's business transaction).
//
//	s, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/app", mysql.Options{Table: "idem_records"})
//	if err != nil { ... }
//	if err := s.Migrate(ctx); err != nil { ... }
//	g, err := idem.New(s, idem.Options{Scope: "billing"})
//
//	// Inbox: the marker and the business write commit together, or neither.
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		_, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id, amount) VALUES (?, ?)", id, amount)
//		return nil, err
//	})
//	switch idem.Decide(res, err) { ... } // ack, retry or dead-letter
//
// New takes a *sql.DB you opened yourself; Open opens one with
// interpolateParams=true (one round trip per statement instead of a prepare
// and an execute). Either way the store works whatever the DSN's
// clientFoundRows and parseTime say; the conformance suite runs with
// clientFoundRows off and on, with interpolated and prepared statements.
//
// # Records
//
// The store holds the record rules of the idem.Store contract:
//
//   - One clock, the caller's. Every time a record holds or is compared with
//     comes from the request (Now, LeaseUntil, ExpiresAt; SweepRequest.Now);
//     no statement reads the server's clock (no NOW()), so how far the
//     servers' clocks are from the fleet's does not matter, only how far the
//     fleet's clocks are from each other.
//   - Lifetime. A claim writes expires_at = the request's ExpiresAt, which
//     Prepare raises to the lease end. Renew sets lease_until and carries
//     the expiry with it: expires_at = GREATEST(expires_at, lease end). Only
//     a settled record (completed, released) expires, when expires_at has
//     passed; an in-progress record never does: past its lease it is stale,
//     however old, and claims report it to the Stale policy, sweeps leave
//     it and Stats counts it stale. Claims, markers, batches, sweeps and
//     Stats all use that condition.
//   - Times are times. Times are BIGINT Unix milliseconds, NULL when unset:
//     0 is the epoch and negative values are before it (migration 2 made
//     the columns NULLable and turned older versions' expires_at 0, their
//     "never", into NULL, which never expires).
//   - Tokens. A claim or marker that inserts the record takes the request's
//     NewToken (Prepare draws it at random in [2^32, 2^52)); a claim of a
//     record that still exists (expired, released, retaken) takes one more
//     than its token. So after a sweep the key's next owner has a token no
//     zombie of the swept record holds. Tokens are always >= 1.
//   - Content. A claim, batch claim or marker of a released record keeps the
//     stored fingerprint (taking the request's only when none is stored),
//     and Release leaves it alone; only an expired record takes new content.
//   - Any fingerprint. Prepare stores fingerprints that are long or not text
//     (raw digest bytes) as "sha256:" + hex (storekit.StoredFingerprint), on every
//     path, batches included; the column keeps up to idem.MaxFingerprintLen
//     bytes.
//   - Data errors are permanent. A value the server refuses (SQLSTATE class
//     22, such as 1264, 1292, 1366 and 1406, and the data errors filed under
//     other classes, such as 1048 and 1265: a column narrowed by hand, a value
//     out of range) is returned as an *idem.InvalidDataError, which the guard
//     dead-letters instead of retrying; so is a result larger than the
//     server's max_allowed_packet, checked before it is sent (results over
//     1 MiB cost one query of the variable), and a request without its times
//     (Prepare refuses it before any statement). Connection loss, timeouts,
//     lock waits and deadlocks stay retryable.
//
// # Schema
//
// Migrate creates the table from embedded, versioned SQL (applied versions
// are kept in "<table>_migrations"); it is idempotent and instances running it
// at once take turns under GET_LOCK. Keys are VARBINARY(200) columns, compared
// byte for byte (no collation folds case, accents or trailing spaces), with
// PRIMARY KEY (scope, id): 400 bytes at most, well inside InnoDB's index
// limit. Longer ids, and ids that begin with "sha256:", are stored as their
// SHA-256 (idem.Key.StoredID), the original kept in display_id; display_id is
// NULL when the key's DisplayID() is its StoredID(), so the common short id is
// not stored twice. Results are LONGBLOB (the server's max_allowed_packet
// bounds them). Times are BIGINT Unix milliseconds: no
// time zones, exact round trips of the caller's clock, a plain integer index
// on expires_at for sweeps.
//
// # Locking
//
// Every statement locks only the records of the keys it names, never a gap
// (inserts take insert-intention locks, which do not block each other), so
// consumers of unrelated keys never wait for each other:
//
//   - Claim of an unseen key is one autocommit INSERT .. ON DUPLICATE KEY
//     UPDATE token = LAST_INSERT_ID(token): it inserts the record with the
//     request's NewToken, or changes nothing and reports the existing token
//     as the insert id (which tells the two apart whatever clientFoundRows
//     does to the affected-rows count).
//   - Claim of an existing key is a READ COMMITTED transaction: SELECT .. FOR
//     UPDATE on the primary key (one record lock), storekit.ApplyClaim, UPDATE.
//     READ COMMITTED because under REPEATABLE READ a locking read that finds
//     nothing (the record was swept meanwhile) would lock the gap around the
//     key. Claimers of one key queue on its record lock, each taking one lock,
//     so they cannot deadlock; should InnoDB report a deadlock anyway (a claim
//     meeting a sweep of the same expired row), the store retries its own
//     transaction, at most 5 times in all, 1 to 8 ms apart with jitter so
//     that the two do not meet again.
//   - Complete, Release and Renew are one fenced UPDATE each (token and state
//     in the WHERE clause); no matching row means idem.ErrLeaseLost. A renewal
//     to the very lease it has changes no row, which without clientFoundRows
//     counts 0: one read of the fence then tells it from a lost lease.
//   - Mark runs in the caller's transaction at whatever isolation it has. Its
//     insert takes an exclusive lock on an existing record rather than the
//     shared lock of INSERT IGNORE, which two transactions would both try to
//     upgrade (a deadlock); the second of two transactions marking one key
//     waits for the first and then reads its marker with a locking read,
//     which sees committed rows even under REPEATABLE READ. Duplicate keys
//     are never caught as errors.
//   - ClaimBatch is one READ COMMITTED transaction per 1000 keys whose first
//     statement takes every lock in one pass in primary-key order: a multi-row
//     INSERT .. ON DUPLICATE KEY UPDATE token = -token inserts the absent keys
//     and marks the existing records (tokens are >= 1, so a negative one means
//     "existed"). Batches meet at their first common key, so they never
//     deadlock on each other. A batch of new keys is done in that one statement; otherwise
//     one read fetches the marked records and one multi-row statement writes
//     them back, taken or restored.
//
// # 100 million rows
//
// The table holds one row per key for the retention window, so its size is
// arrival rate × retention: 100M rows is about 165 messages/s kept for a
// week. Sweep deletes expired rows oldest first through the expires_at index
// (SELECT scope, id .. WHERE expires_at <= ? AND NOT (state = 'in_progress'
// AND lease_until > ?) ORDER BY expires_at LIMIT n FOR UPDATE SKIP LOCKED: a
// range read of the index, which only steps over the rare live leases whose
// expiry an older version did not carry; then a DELETE of those rows by
// primary key), so each batch costs what it deletes, never a scan. The
// sweep never waits for a row lock, so it cannot deadlock with the claims,
// completes and renewals that move expires_at (SKIP LOCKED needs MariaDB
// 10.6 or MySQL 8.0). A Limit of zero or less deletes nothing. It runs in a
// READ COMMITTED transaction (no gap locks in front of inserts) from one
// instance at a time (GET_LOCK named after the database and table; other
// instances return 0 at once).
// Keep batches small and sweep often enough to keep up with the arrival
// rate.
//
// Range partitioning by expires_at, the usual way to drop a day of rows at
// once, is not possible here: MySQL and MariaDB require every unique key,
// the primary key included, to contain the partitioning column (error 1503),
// and (scope, id) must stay unique on its own or two claims of one key would
// both succeed. Adding expires_at to the primary key would give up exactly
// that. So the records table is not partitioned by time: the index-driven
// batched sweep is the cleanup, and its cost is proportional to the rows
// removed. If purge lag ever matters (history list length grows under a
// heavy sweep), lower the batch size and sweep more often rather than
// delete more per statement. Hash partitioning (PARTITION BY KEY (scope, id))
// is compatible with the schema and spreads a huge table over smaller
// B-trees, but it does not make cleanup cheaper.
//
// # Performance
//
// At 8 workers on a local MariaDB, measured interleaved with
// go test -run '^$' -bench BenchmarkRatios -benchtime=20x -count=5: the
// inbox runs at 0.87 of the rate of the bare business insert (one
// transaction each), two-phase claim + complete at 0.67, and batch claims at
// 0.45 of a raw multi-row insert. BENCH.md in this directory has the figures
// and how to read them.
package mysql
