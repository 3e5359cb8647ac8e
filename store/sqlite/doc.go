// Package sqlite is idem's embedded default store: an idem.Store on SQLite
// through database/sql and the pure-Go driver modernc.org/sqlite (no cgo).
// It implements idem.Store (two-phase records), storekit.BatchStore,
// idem.Inspector and idem.TxStore[*sql.Tx] (the transactional inbox).
//
// # Opening
//
// Open a file and migrate once at start-up:
//
//	store, err := sqlite.Open("app.db", sqlite.Options{}) // table "idem_records"
//	if err != nil { ... }
//	defer store.Close()
//	if err := store.Migrate(ctx); err != nil { ... }
//
// Open uses WAL (readers never wait for the writer), a busy timeout of 5s,
// transactions that begin IMMEDIATE, and synchronous=FULL: every commit syncs
// the write-ahead log, so a marker is on disk before the message is acked and
// survives a power loss. SyncNormal trades that for speed (a power loss, not a
// process crash, may undo the last commits, and their messages were acked
// already); choose it only when an occasional duplicate after a power cut is
// acceptable.
//
// To share your own *sql.DB, open it with DSN's settings and wrap it with New.
// Migrate is idempotent and versioned per table (the idem_schema_versions
// table), so several tables can live in one database.
//
// # Two-phase records
//
// For side effects outside the database (an HTTP call, an e-mail):
//
//	g, _ := idem.New(store, idem.Options{Scope: "mailer"})
//	res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
//		return send(ctx, idem.DeriveKey(ctx, "send"))
//	})
//
// # Transactional inbox
//
// When the side effects are rows in the same SQLite database, write them in
// the marker's transaction: commit makes both durable, or neither.
//
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, ?)`, id, amount)
//		return nil, err
//	})
//
// The marker is one conflict-free upsert (INSERT .. ON CONFLICT DO UPDATE ..
// WHERE the record is expired or released); no statement ever fails on the
// primary key. Inside fn, write through tx only: a write through the store or
// another connection waits for the transaction's own lock and fails after the
// busy timeout ([ErrBusy] from the store's methods). To manage the
// transaction yourself, begin it on [Store.DB] and call idem.MarkTx.
//
// # Concurrency and deployment
//
// SQLite has one writer. Write transactions hold the writer lock from their
// first statement, so two of them never deadlock upgrading a read lock, and a
// Store queues its own writers in-process rather than in SQLite's busy handler
// (which sleeps in millisecond steps). Claims that change nothing (duplicates,
// keys in progress elsewhere) are answered by a read, without the lock.
// Several processes may share the file on one host (the busy timeout arbitrates),
// but SQLite suits single-host deployments: use store/postgres, store/mysql or
// store/redis for a fleet. Never put the file on a network file system.
//
// # Records
//
// The store holds the record rules of the idem.Store contract, in its own SQL
// for the marker and the sweep and through storekit.ApplyClaim for claims:
//
//   - Every time comes from the request (the caller's clock); no statement
//     reads SQLite's clock.
//   - A request goes through its Prepare first: one without its times is an
//     *idem.InvalidDataError, and any fingerprint bytes are stored (as
//     storekit.StoredFingerprint keeps them).
//   - A key's first record takes the request's random NewToken; a record that
//     still exists (expired, released, retaken) counts on from its own token.
//     A zombie from a swept lifetime therefore never matches a later owner.
//   - A released record keeps the fingerprint it was first claimed with; only
//     an expired one starts a new lifetime with the request's.
//   - Only settled records expire: no claim, marker, sweep or count treats
//     an in-progress record as expired, whatever its expires_at. Past its
//     lease it is stale (the Stale policy decides) and Sweep leaves it.
//     Renew sets expires_at to max(expires_at, lease_until).
//   - Sweep deletes at most Limit records (none when Limit <= 0).
//   - A value SQLite refuses (SQLITE_TOOBIG, SQLITE_MISMATCH,
//     SQLITE_CONSTRAINT) is an *idem.InvalidDataError, permanent; busy and
//     locked databases, I/O errors and ErrBusy stay retryable.
//
// # Schema
//
// One table, primary key (scope, id), with display_id, state, fingerprint,
// result (BLOB), token and attempts; lease_until, expires_at, created_at and
// updated_at are integer unix milliseconds, NULL when unset (0 is the epoch
// and negative values are before it; migration 2 turned the 0 that older
// versions wrote for "never expires" into NULL). An index on expires_at serves Sweep, which deletes one bounded
// batch per call: run an idem.Sweeper over the store so the file stays the
// size of the retention window.
package sqlite
