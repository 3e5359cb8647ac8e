// Package outboxmysql is the transactional outbox on MariaDB and MySQL
// (InnoDB, go-sql-driver/mysql through database/sql): messages are written
// in the caller's *sql.Tx, beside the business rows and the idem inbox
// marker of store/mysql, and the relay publishes them.
//
//	import outboxmysql "github.com/idemgo/idem/outbox/mysql"
//
//	ob, _ := outboxmysql.New(db, outboxmysql.Options{})
//	err := ob.Migrate(ctx)
//	_, err = idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
//		// business writes in tx, then:
//		return nil, ob.Enqueue(ctx, tx, outbox.Message{Destination: "billing.charged", Payload: body})
//	})
//
// # Commit order per ordering key
//
// Enqueue locks a row of the key-slot table (Table+"_keys", one row per
// 16-bit hash of an ordering key, so never more than 65536 rows) with
// INSERT .. ON DUPLICATE KEY UPDATE before inserting the messages: a second
// transaction on the same key waits for the first to end before its rows
// get their AUTO_INCREMENT Seq, so per key Seq order is commit order. Keys
// sharing a slot only wait for each other. Messages without a key take no
// lock and cost one statement; messages with keys cost two.
//
// # Schema
//
// Migrate creates the table (Options.Table, default idem_outbox), its lease
// and key-slot tables. Text columns are utf8mb4 with the binary collation,
// so ids and keys compare byte for byte. One index on (published_at, seq)
// serves the relay (pending rows have a NULL published_at, in Seq order;
// Fetch names the index, so the optimizer never walks the primary key
// through the published rows) and cleanup (the published ones, oldest
// first). Another, on a virtual column that holds the ordering key of
// failed and parked records only, finds the keys they hold back without
// reading any other row. Times are BIGINT unix milliseconds from the
// callers' clocks. The store works whatever the DSN's interpolateParams and
// clientFoundRows.
package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/sqlout"
)

// DefaultTable is the outbox table used when Options.Table is empty.
const DefaultTable = sqlout.DefaultTable

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the outbox table, a plain identifier; Migrate creates it,
	// Table+"_lease" and Table+"_keys". Default idem_outbox.
	Table string
	// Limits bound what Enqueue takes. Keep MaxPayload well under the
	// server's max_allowed_packet.
	Limits outbox.Limits
	// Clock gives the CreatedAt of enqueued messages; default time.Now.
	Clock func() time.Time
}

// Store is an outbox on a MariaDB or MySQL table. It is safe for
// concurrent use by many goroutines and processes. Besides Enqueue and
// Migrate it implements outbox.Store and outbox.Inspector (Fetch,
// MarkPublished, MarkFailed, Lease, ReleaseLease, Cleanup, List, Stats,
// Retry), with SQL it shares with outbox/sqlite.
type Store struct {
	*relay
	db    *sql.DB
	opts  Options
	table string
	lease string
	keys  string
}

type relay = sqlout.Store

var (
	_ outbox.Store     = (*Store)(nil)
	_ outbox.Inspector = (*Store)(nil)
)

// New returns a store over db, a pool opened with go-sql-driver/mysql. It
// validates opts (errors wrap outbox.ErrInvalidOptions) and does not touch
// the database: call Migrate once at start-up.
func New(db *sql.DB, opts Options) (*Store, error) {
	if err := sqlout.Check("outboxmysql", db, &opts.Table, opts.Limits, &opts.Clock); err != nil {
		return nil, err
	}
	q := func(name string) string { return "`" + name + "`" }
	s := &Store{db: db, opts: opts, table: q(opts.Table), lease: q(opts.Table + "_lease"), keys: q(opts.Table + "_keys")}
	idx := func(suffix string) string { return "`" + opts.Table + suffix + "`" }
	s.relay = sqlout.New(db, s.table, s.lease, sqlout.Dialect{
		Name:    "outboxmysql",
		Cleanup: `DELETE FROM {{T}} WHERE published_at < ? ORDER BY published_at LIMIT ?`,
		// The optimizer would walk the primary key from its start, through
		// every published row the retention keeps, for each batch.
		Pending: `FORCE INDEX (` + idx("_published_idx") + `)`,
		Blocked: `SELECT failed_key AS ordering_key, MIN(seq) AS seq FROM {{T}} FORCE INDEX (` + idx("_failed_idx") + `)
	WHERE failed_key IS NOT NULL AND (parked <> 0 OR next_attempt_at > ?)
	GROUP BY failed_key`,
		WrapErr: wrapErr,
	})
	return s, nil
}

// Table returns the outbox table's name.
func (s *Store) Table() string { return s.opts.Table }

// Migrate creates the outbox table, its lease and key-slot tables and the
// lease row if they do not exist.
func (s *Store) Migrate(ctx context.Context) error {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + s.table + ` (
	seq             BIGINT       NOT NULL AUTO_INCREMENT,
	id              VARCHAR(200) NOT NULL,
	destination     VARCHAR(255) NOT NULL,
	routing_key     VARCHAR(255) NOT NULL,
	ordering_key    VARCHAR(255) NOT NULL,
	headers         MEDIUMTEXT   NOT NULL,
	payload         LONGBLOB     NOT NULL,
	fingerprint     VARCHAR(100) NOT NULL,
	created_at      BIGINT       NOT NULL,
	next_attempt_at BIGINT       NOT NULL,
	attempts        INT          NOT NULL DEFAULT 0,
	last_error      TEXT         NOT NULL,
	parked          TINYINT(1)   NOT NULL DEFAULT 0,
	published_at    BIGINT       NULL,
	not_before      BIGINT       NULL,
	enqueued        INT          NOT NULL DEFAULT 1 COMMENT 'times Enqueue wrote this id (a handler run again)',
	failed_key      VARCHAR(255) AS (CASE WHEN published_at IS NULL AND ordering_key <> '' AND (parked <> 0 OR attempts > 0)
	                    THEN ordering_key END) VIRTUAL COMMENT 'the ordering key a failed or parked record may hold back',
	PRIMARY KEY (seq),
	UNIQUE KEY ` + "`" + s.opts.Table + "_id_idx`" + ` (id),
	KEY ` + "`" + s.opts.Table + "_published_idx`" + ` (published_at, seq),
	KEY ` + "`" + s.opts.Table + "_failed_idx`" + ` (failed_key, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS ` + s.lease + ` (
	name  VARCHAR(16)  NOT NULL PRIMARY KEY,
	owner VARCHAR(255) NOT NULL,
	token BIGINT       NOT NULL,
	until BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`INSERT IGNORE INTO ` + s.lease + ` (name, owner, token, until) VALUES ('relay', '', 0, 0)`,
		`CREATE TABLE IF NOT EXISTS ` + s.keys + ` (slot INT NOT NULL PRIMARY KEY) ENGINE=InnoDB`,
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return wrapErr("migrate", err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrapErr("migrate", err)
	}
	defer tx.Rollback()
	// A table made before not_before existed gets it (MySQL has no ADD
	// COLUMN IF NOT EXISTS; DDL commits at once, the transaction only
	// holds the check and the change on one connection).
	if err := sqlout.AddNotBefore(ctx, tx, `SELECT COUNT(*) FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'not_before'`, s.opts.Table, s.table); err != nil {
		return wrapErr("migrate", err)
	}
	if err := tx.Commit(); err != nil {
		return wrapErr("migrate", err)
	}
	return nil
}

// maxRows bounds the messages of one INSERT.
const maxRows = 500

// Enqueue writes msgs in tx, the caller's transaction: the key-slot locks
// of their ordering keys first (see the package doc), then one INSERT .. ON
// DUPLICATE KEY UPDATE per 500 messages, so a message already held (a
// handler run twice) is not written again and the transaction never fails
// on the unique id. An id held with another fingerprint makes Enqueue
// return a *outbox.ConflictError: roll back. Invalid messages are refused
// with a *outbox.MessageError before anything is written.
func (s *Store) Enqueue(ctx context.Context, tx *sql.Tx, msgs ...outbox.Message) error {
	locked := false
	return sqlout.Records(ctx, "outboxmysql", tx, s.opts.Clock, s.opts.Limits, msgs, maxRows, func(recs []outbox.Record) error {
		if !locked {
			if err := s.lockKeys(ctx, tx, msgs); err != nil {
				return err
			}
			locked = true
		}
		return s.insert(ctx, tx, recs)
	})
}

// lockKeys locks the slots of msgs' ordering keys, in slot order.
func (s *Store) lockKeys(ctx context.Context, tx *sql.Tx, msgs []outbox.Message) error {
	var slots []any
	for _, r := range msgs {
		if r.OrderingKey == "" {
			continue
		}
		h := fnv.New32a()
		h.Write([]byte(r.OrderingKey))
		if slot := int64(h.Sum32() & 0xffff); !slices.Contains(slots, any(slot)) {
			slots = append(slots, slot)
		}
	}
	if len(slots) == 0 {
		return nil
	}
	slices.SortFunc(slots, func(a, b any) int { return int(a.(int64) - b.(int64)) })
	q := `INSERT INTO ` + s.keys + ` (slot) VALUES ` + strings.TrimSuffix(strings.Repeat("(?),", len(slots)), ",") +
		` ON DUPLICATE KEY UPDATE slot = slot`
	if _, err := tx.ExecContext(ctx, q, slots...); err != nil {
		return wrapErr("enqueue: lock ordering keys", err)
	}
	return nil
}

// insert writes recs. A held id is "updated" (its enqueued count), which
// counts two affected rows whatever the DSN's clientFoundRows, so the
// affected rows tell whether any was held; only then are their stored
// fingerprints read (the update locked them and made this transaction see
// their latest committed version).
func (s *Store) insert(ctx context.Context, tx *sql.Tx, recs []outbox.Record) error {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + s.table + ` (id, destination, routing_key, ordering_key, headers, payload, fingerprint, created_at, next_attempt_at, not_before, last_error) VALUES `)
	args := make([]any, 0, 10*len(recs))
	for i, r := range recs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?,'')")
		payload := r.Payload
		if payload == nil {
			payload = []byte{}
		}
		ms := sqlout.MS(r.CreatedAt)
		args = append(args, r.ID, r.Destination, r.RoutingKey, r.OrderingKey, outbox.EncodeHeaders(r.Headers), payload, r.Fingerprint, ms, ms, sqlout.NullMS(r.NotBefore))
	}
	b.WriteString(` ON DUPLICATE KEY UPDATE enqueued = enqueued + 1`)
	res, err := tx.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return wrapErr("enqueue", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrapErr("enqueue", err)
	}
	if n == int64(len(recs)) {
		return nil
	}
	return s.checkHeld(ctx, tx, recs)
}

func (s *Store) checkHeld(ctx context.Context, tx *sql.Tx, recs []outbox.Record) error {
	args := make([]any, len(recs))
	for i, r := range recs {
		args[i] = r.ID
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, fingerprint FROM `+s.table+` WHERE id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(recs)), ",")+`)`, args...)
	if err != nil {
		return wrapErr("enqueue", err)
	}
	defer rows.Close()
	stored := map[string]string{}
	for rows.Next() {
		var id, fp string
		if err := rows.Scan(&id, &fp); err != nil {
			return wrapErr("enqueue", err)
		}
		stored[id] = fp
	}
	if err := rows.Err(); err != nil {
		return wrapErr("enqueue", err)
	}
	for _, r := range recs {
		if fp, ok := stored[r.ID]; ok && fp != r.Fingerprint {
			return &outbox.ConflictError{ID: r.ID, Fingerprint: r.Fingerprint, Stored: fp}
		}
	}
	return nil
}

// wrapErr names the operation. The server's refusals of a value (SQLSTATE
// class 22: too long, bad UTF-8; a packet over max_allowed_packet) are
// *idem.InvalidDataError: permanent.
func wrapErr(op string, err error) error {
	var me *gomysql.MySQLError
	if errors.As(err, &me) && (strings.HasPrefix(string(me.SQLState[:]), "22") || me.Number == 1153 || me.Number == 1301) {
		return &idem.InvalidDataError{Op: "outbox " + op, Err: fmt.Errorf("outboxmysql: %w", err)}
	}
	return fmt.Errorf("outboxmysql: %s: %w", op, err)
}
