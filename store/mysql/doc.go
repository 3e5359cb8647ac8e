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
// The guide, with the schema, locking, sizing and the sweep:
// https://github.com/idemgo/idem/blob/main/docs/stores/mysql.md
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
package mysql
