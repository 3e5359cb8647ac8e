// Package outboxsqlite is the transactional outbox on SQLite
// (modernc.org/sqlite, through database/sql): messages are written in the
// caller's *sql.Tx, beside the business rows and the idem inbox marker of
// store/sqlite, and the relay publishes them.
//
//	import outboxsqlite "github.com/idemgo/idem/outbox/sqlite"
//
//	inbox, _ := sqlite.Open("app.db", sqlite.Options{})      // store/sqlite
//	ob, _ := outboxsqlite.New(inbox.DB(), outboxsqlite.Options{})
//	err := ob.Migrate(ctx)
//	_, err = idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		// business writes in tx, then:
//		return nil, ob.Enqueue(ctx, tx, outbox.Message{Destination: "billing.charged", Payload: body})
//	})
//
// SQLite runs one write transaction at a time, so Seq order is commit order
// without any lock of the outbox's own. The relay's writes (marks, the
// lease) wait for the database's writer lock like any other: open the
// database with a busy timeout (store/sqlite's DSN has one).
//
// Migrate creates the table (Options.Table, default idem_outbox), its lease
// table (Table+"_lease") and partial indexes on the pending, the failed and
// the published rows. Times are integer unix milliseconds from the callers'
// clocks.
package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/sqlout"
)

// DefaultTable is the outbox table used when Options.Table is empty.
const DefaultTable = sqlout.DefaultTable

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the outbox table, a plain identifier; Migrate creates it and
	// Table+"_lease". Default idem_outbox.
	Table string
	// Limits bound what Enqueue takes.
	Limits outbox.Limits
	// Clock gives the CreatedAt of enqueued messages; default time.Now.
	Clock func() time.Time
}

// Store is an outbox on a SQLite table. It is safe for concurrent use.
// Besides Enqueue and Migrate it implements outbox.Store and
// outbox.Inspector (Fetch, MarkPublished, MarkFailed, Lease, ReleaseLease,
// Cleanup, List, Stats, Retry), with SQL it shares with outbox/mysql.
type Store struct {
	*relay
	db    *sql.DB
	opts  Options
	table string
	lease string
}

type relay = sqlout.Store

var (
	_ outbox.Store     = (*Store)(nil)
	_ outbox.Inspector = (*Store)(nil)
)

// New returns a store over db, a database opened with modernc.org/sqlite
// (store/sqlite's Store.DB, or sql.Open with store/sqlite's DSN). It
// validates opts (errors wrap outbox.ErrInvalidOptions) and does not touch
// the database: call Migrate once at start-up.
func New(db *sql.DB, opts Options) (*Store, error) {
	if err := sqlout.Check("outboxsqlite", db, &opts.Table, opts.Limits, &opts.Clock); err != nil {
		return nil, err
	}
	if strings.HasPrefix(strings.ToLower(opts.Table), "sqlite_") {
		return nil, fmt.Errorf("%w: table %q: names starting with sqlite_ are SQLite's", outbox.ErrInvalidOptions, opts.Table)
	}
	s := &Store{db: db, opts: opts, table: `"` + opts.Table + `"`, lease: `"` + opts.Table + `_lease"`}
	s.relay = sqlout.New(db, s.table, s.lease, sqlout.Dialect{
		Name:    "outboxsqlite",
		Cleanup: `DELETE FROM {{T}} WHERE seq IN (SELECT seq FROM {{T}} WHERE published_at < ? ORDER BY published_at LIMIT ?)`,
		WrapErr: wrapErr,
	})
	return s, nil
}

// Table returns the outbox table's name.
func (s *Store) Table() string { return s.opts.Table }

// Migrate creates the outbox table, its indexes, its lease table and the
// lease row if they do not exist.
func (s *Store) Migrate(ctx context.Context) error {
	t, name := s.table, s.opts.Table
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	id              TEXT    NOT NULL UNIQUE,
	destination     TEXT    NOT NULL,
	routing_key     TEXT    NOT NULL DEFAULT '',
	ordering_key    TEXT    NOT NULL DEFAULT '',
	headers         TEXT    NOT NULL DEFAULT '',
	payload         BLOB    NOT NULL,
	fingerprint     TEXT    NOT NULL,
	created_at      INTEGER NOT NULL,
	next_attempt_at INTEGER NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT    NOT NULL DEFAULT '',
	parked          INTEGER NOT NULL DEFAULT 0,
	published_at    INTEGER,
	not_before      INTEGER
)`,
		`CREATE INDEX IF NOT EXISTS "` + name + `_pending_idx" ON ` + t + ` (seq) WHERE published_at IS NULL`,
		`CREATE INDEX IF NOT EXISTS "` + name + `_failed_idx" ON ` + t + ` (ordering_key, seq)
	WHERE published_at IS NULL AND ordering_key <> '' AND (parked <> 0 OR attempts > 0)`,
		`CREATE INDEX IF NOT EXISTS "` + name + `_published_idx" ON ` + t + ` (published_at) WHERE published_at IS NOT NULL`,
		`CREATE TABLE IF NOT EXISTS ` + s.lease + ` (
	name  TEXT    PRIMARY KEY,
	owner TEXT    NOT NULL,
	token INTEGER NOT NULL,
	until INTEGER NOT NULL
)`,
		`INSERT OR IGNORE INTO ` + s.lease + ` (name, owner, token, until) VALUES ('relay', '', 0, 0)`,
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrapErr("migrate", err)
	}
	defer tx.Rollback()
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return wrapErr("migrate", err)
		}
	}
	if err := sqlout.AddNotBefore(ctx, tx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'not_before'`, name, t); err != nil {
		return wrapErr("migrate", err)
	}
	if err := tx.Commit(); err != nil {
		return wrapErr("migrate", err)
	}
	return nil
}

// maxRows bounds the messages of one INSERT (ten variables each).
const maxRows = 500

// Enqueue writes msgs in tx, the caller's transaction, with one INSERT ..
// ON CONFLICT(id) per 500 messages: a message already held with the same
// fingerprint (a handler run twice) is left alone; an id held with another
// fingerprint makes Enqueue return a *outbox.ConflictError (roll back).
// Invalid messages are refused with a *outbox.MessageError before anything
// is written.
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, msgs ...outbox.Message) error {
	return sqlout.Records(ctx, "outboxsqlite", tx, s.opts.Clock, s.opts.Limits, msgs, maxRows, func(recs []outbox.Record) error {
		return s.insert(ctx, tx, recs)
	})
}

// insert writes recs and returns the first conflict: the statement returns
// the rows it inserted and, by a no-op update, those held with another
// fingerprint.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, recs []outbox.Record) error {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + s.table + ` (id, destination, routing_key, ordering_key, headers, payload, fingerprint, created_at, next_attempt_at, not_before) VALUES `)
	args := make([]any, 0, 10*len(recs))
	fp := make(map[string]string, len(recs))
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?)")
		payload := r.Payload
		if payload == nil {
			payload = []byte{}
		}
		ms := sqlout.MS(r.CreatedAt)
		args = append(args, r.ID, r.Destination, r.RoutingKey, r.OrderingKey, outbox.EncodeHeaders(r.Headers), payload, r.Fingerprint, ms, ms, sqlout.NullMS(r.NotBefore))
		fp[r.ID] = r.Fingerprint
	}
	b.WriteString(` ON CONFLICT(id) DO UPDATE SET fingerprint = fingerprint WHERE fingerprint <> excluded.fingerprint RETURNING id, fingerprint`)
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return wrapErr("enqueue", err)
	}
	defer rows.Close()
	var conflict error
	for rows.Next() {
		var id, stored string
		if err := rows.Scan(&id, &stored); err != nil {
			return wrapErr("enqueue", err)
		}
		if want := fp[id]; stored != want && conflict == nil {
			conflict = &outbox.ConflictError{ID: id, Fingerprint: want, Stored: stored}
		}
	}
	if err := rows.Err(); err != nil {
		return wrapErr("enqueue", err)
	}
	return conflict
}

// wrapErr names the operation. SQLite's refusals of a value (too big, a
// constraint other than the id's) are *idem.InvalidDataError: permanent.
func wrapErr(op string, err error) error {
	msg := err.Error()
	if strings.Contains(msg, "too big") || strings.Contains(msg, "SQLITE_TOOBIG") {
		return &idem.InvalidDataError{Op: "outbox " + op, Err: fmt.Errorf("outboxsqlite: %w", err)}
	}
	return fmt.Errorf("outboxsqlite: %s: %w", op, err)
}
