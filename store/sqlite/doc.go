// Package sqlite is idem's embedded default store: an idem.Store on SQLite
// through database/sql and the pure-Go driver modernc.org/sqlite (no cgo).
// It implements idem.Store (two-phase records), storekit.BatchStore,
// idem.Inspector and idem.TxStore[*sql.Tx] (the transactional inbox).
//
// The guide, with the schema, deployment and sizing:
// https://github.com/idemgo/idem/blob/main/docs/stores/sqlite.md
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
package sqlite
