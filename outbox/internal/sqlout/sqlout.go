// Package sqlout is the relay's side of the outbox stores over
// database/sql (outbox/sqlite, outbox/mysql): one SQL text for both
// databases wherever they agree (times as integer unix milliseconds, ?
// placeholders, scalar subqueries and CTEs), and the statements they do
// not share given by the store.
package sqlout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/sqlname"
)

// DefaultTable is the outbox table of a store whose Options name none.
const DefaultTable = "idem_outbox"

// Check validates a store's options for pkg's New, filling in the
// defaults: a table name (DefaultTable) and a clock (time.Now). Errors
// wrap outbox.ErrInvalidOptions.
func Check(pkg string, db *sql.DB, table *string, lim outbox.Limits, clock *func() time.Time) error {
	if db == nil {
		return fmt.Errorf("%w: %s.New with a nil *sql.DB", outbox.ErrInvalidOptions, pkg)
	}
	if *table == "" {
		*table = DefaultTable
	}
	if _, _, err := sqlname.Split(*table, false, 64, "_published_idx"); err != nil {
		return err
	}
	if *clock == nil {
		*clock = time.Now
	}
	return lim.Validate()
}

// Records prepares msgs for an Enqueue into tx, created at clock's
// millisecond (the stored precision), and passes them to insert in chunks
// of at most n.
func Records(ctx context.Context, pkg string, tx *sql.Tx, clock func() time.Time, lim outbox.Limits, msgs []outbox.Message,
	n int, insert func([]outbox.Record) error) error {
	if len(msgs) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("%s: Enqueue with a nil transaction", pkg)
	}
	recs, err := outbox.Prepare(ctx, clock().Truncate(time.Millisecond), lim, msgs)
	if err != nil {
		return err
	}
	for len(recs) > 0 {
		chunk := recs[:min(len(recs), n)]
		recs = recs[len(chunk):]
		if err := insert(chunk); err != nil {
			return err
		}
	}
	return nil
}

// Dialect holds what a database does its own way.
type Dialect struct {
	// Name prefixes errors ("outboxsqlite").
	Name string
	// Cleanup deletes the rows published before ? (unix ms), at most ?,
	// oldest first; {{T}} is the table.
	Cleanup string
	// Blocked selects (ordering_key, MIN(seq) AS seq) of the keys held
	// back at ? (unix ms): pending records that are parked or backing off.
	// Default: a query SQLite's partial index of failed rows answers.
	Blocked string
	// Pending follows "FROM {{T}} o" in Fetch: an index hint that makes
	// the database walk its pending rows in Seq order ("" for none).
	Pending string
	// WrapErr names the operation and classifies the database's data
	// errors (*idem.InvalidDataError); nil: fmt.Errorf with Name and op.
	WrapErr func(op string, err error) error
}

// Store is the relay's side over one table and its lease table.
type Store struct {
	DB *sql.DB
	d  Dialect
	q  queries
}

type queries struct {
	fetch, markPublished, lease, leaseGet, release, cleanup string
	markFailed, stats, list, retry                          string
}

// Columns are the columns Scan reads, in its order.
const Columns = `seq, id, destination, routing_key, ordering_key, headers, payload, fingerprint,
	created_at, next_attempt_at, attempts, last_error, parked, published_at, not_before`

// New returns the relay's side over table and lease (both quoted as the
// database needs).
func New(db *sql.DB, table, lease string, d Dialect) *Store {
	r := strings.NewReplacer("{{T}}", table, "{{L}}", lease)
	blocked := d.Blocked
	if blocked == "" {
		blocked = `SELECT ordering_key, MIN(seq) AS seq FROM {{T}}
	WHERE published_at IS NULL AND ordering_key <> '' AND (parked <> 0 OR attempts > 0)
		AND (parked <> 0 OR next_attempt_at > ?)
	GROUP BY ordering_key`
	}
	return &Store{DB: db, d: d, q: queries{
		// A key is blocked from its first pending record that is parked or
		// backing off: few rows, found by the index of failed rows where
		// the database has partial indexes.
		fetch: r.Replace(`WITH blocked AS (
	` + blocked + `
)
SELECT ` + Columns + ` FROM {{T}} o ` + d.Pending + `
WHERE o.published_at IS NULL AND o.parked = 0 AND o.next_attempt_at <= ?
	AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.ordering_key = o.ordering_key AND b.seq < o.seq)
	{{EXCLUDE}}
ORDER BY o.seq
LIMIT ?`),
		markPublished: r.Replace(`UPDATE {{T}} SET published_at = ? WHERE published_at IS NULL AND seq IN (`),
		markFailed:    r.Replace(`UPDATE {{T}} SET attempts = ?, next_attempt_at = ?, last_error = ?, parked = ? WHERE seq = ? AND published_at IS NULL`),
		// Renewed by its holder while it lasts; taken with the next token
		// once it ended. The token is assigned first, from the row as it
		// was (MySQL assigns left to right).
		lease: r.Replace(`UPDATE {{L}} SET
	token = CASE WHEN owner = ? AND token = ? AND ? <> 0 AND until > ? THEN token ELSE token + 1 END,
	owner = ?, until = ?
WHERE name = 'relay' AND ((owner = ? AND token = ? AND ? <> 0 AND until > ?) OR until <= ?)`),
		leaseGet: r.Replace(`SELECT owner, token, until FROM {{L}} WHERE name = 'relay'`),
		release:  r.Replace(`UPDATE {{L}} SET until = 0 WHERE name = 'relay' AND owner = ? AND token = ?`),
		cleanup:  r.Replace(d.Cleanup),
		stats: r.Replace(`SELECT
	(SELECT COUNT(*) FROM {{T}} WHERE published_at IS NULL AND parked = 0),
	(SELECT COUNT(*) FROM {{T}} WHERE published_at IS NULL AND parked <> 0),
	(SELECT COUNT(*) FROM {{T}} WHERE published_at IS NOT NULL),
	(SELECT MIN(created_at) FROM {{T}} WHERE published_at IS NULL AND parked = 0),
	owner, token, until
FROM {{L}} WHERE name = 'relay'`),
		// {{HINT}} and {{STATE}}: the state's own predicate, and for pending
		// and parked records the index of pending rows.
		list: r.Replace(`SELECT ` + Columns + ` FROM {{T}} {{HINT}}
WHERE seq > ? AND {{STATE}}
	AND (? = '' OR destination = ?) AND (? = '' OR ordering_key = ?)
ORDER BY seq
LIMIT ?`),
		retry: r.Replace(`UPDATE {{T}} SET parked = 0, attempts = 0, next_attempt_at = ? WHERE published_at IS NULL AND parked <> 0`),
	}}
}

func (s *Store) wrap(op string, err error) error {
	if s.d.WrapErr != nil {
		return s.d.WrapErr(op, err)
	}
	return fmt.Errorf("%s: %s: %w", s.d.Name, op, err)
}

// MS is a time as stored: unix milliseconds, 0 for the zero time.
func MS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// NullMS is an optional time as stored: unix milliseconds, NULL for the
// zero time.
func NullMS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// AddNotBefore adds the not_before column (Message.NotBefore, unix ms,
// NULL for none) to an outbox table made before it existed, in tx: has
// counts the table's columns named not_before (one argument, the table's
// plain name).
func AddNotBefore(ctx context.Context, tx *sql.Tx, has, table, quoted string) error {
	var n int
	if err := tx.QueryRowContext(ctx, has, table).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, `ALTER TABLE `+quoted+` ADD COLUMN not_before BIGINT NULL`)
	return err
}

// FromMS reads MS's value back (0: the zero time).
func FromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// Scan reads records selected as Columns.
func Scan(rows *sql.Rows, capacity int) ([]outbox.Record, error) {
	defer rows.Close()
	out := make([]outbox.Record, 0, min(capacity, 1024))
	for rows.Next() {
		var (
			r                      outbox.Record
			headers                string
			created, next          int64
			published, notBefore   sql.NullInt64
			routing, ordering, msg string
		)
		if err := rows.Scan(&r.Seq, &r.ID, &r.Destination, &routing, &ordering, &headers, &r.Payload, &r.Fingerprint,
			&created, &next, &r.Attempts, &msg, &r.Parked, &published, &notBefore); err != nil {
			return nil, err
		}
		h, err := outbox.DecodeHeaders(headers)
		if err != nil {
			return nil, err
		}
		r.RoutingKey, r.OrderingKey, r.LastError, r.Headers = routing, ordering, msg, h
		r.CreatedAt, r.NextAttemptAt = FromMS(created), FromMS(next)
		if published.Valid {
			r.PublishedAt = FromMS(published.Int64)
		}
		if notBefore.Valid {
			r.NotBefore = FromMS(notBefore.Int64)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Fetch implements outbox.Store.
func (s *Store) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	if req.Limit <= 0 {
		return nil, ctx.Err()
	}
	now := MS(req.Now)
	args := []any{now, now}
	exclude := ""
	if len(req.Exclude) > 0 {
		exclude = "AND o.seq NOT IN (" + strings.TrimSuffix(strings.Repeat("?,", len(req.Exclude)), ",") + ")"
		for _, seq := range req.Exclude {
			args = append(args, seq)
		}
	}
	rows, err := s.DB.QueryContext(ctx, strings.Replace(s.q.fetch, "{{EXCLUDE}}", exclude, 1), append(args, req.Limit)...)
	if err != nil {
		return nil, s.wrap("fetch", err)
	}
	recs, err := Scan(rows, req.Limit)
	if err != nil {
		return nil, s.wrap("fetch", err)
	}
	return recs, nil
}

// maxIn bounds the seqs of one IN list (SQLite's default variable limit is
// 32766, MySQL's placeholders 65535).
const maxIn = 1000

// MarkPublished implements outbox.Store: one UPDATE per 1000 seqs.
func (s *Store) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), maxIn)]
		seqs = seqs[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, MS(now))
		for _, seq := range chunk {
			args = append(args, seq)
		}
		q := s.q.markPublished + strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",") + ")"
		if _, err := s.DB.ExecContext(ctx, q, args...); err != nil {
			return s.wrap("mark published", err)
		}
	}
	return ctx.Err()
}

// MarkFailed implements outbox.Store: one transaction, one UPDATE per
// failure (failures are few).
func (s *Store) MarkFailed(ctx context.Context, fs []outbox.Failure) error {
	if len(fs) == 0 {
		return ctx.Err()
	}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("mark failed", err)
	}
	defer tx.Rollback()
	for _, f := range fs {
		if _, err := tx.ExecContext(ctx, s.q.markFailed, f.Attempts, MS(f.NextAttemptAt), f.Error, f.Park, f.Seq); err != nil {
			return s.wrap("mark failed", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("mark failed", err)
	}
	return nil
}

// Lease implements outbox.Store: one conditional UPDATE of the lease row
// (which Migrate creates), then the row as it is.
func (s *Store) Lease(ctx context.Context, req outbox.LeaseRequest) (outbox.Lease, error) {
	now, until := MS(req.Now), MS(req.Until)
	if _, err := s.DB.ExecContext(ctx, s.q.lease,
		req.Owner, req.Token, req.Token, now, req.Owner, until,
		req.Owner, req.Token, req.Token, now, now); err != nil {
		return outbox.Lease{}, s.wrap("lease", err)
	}
	var (
		l  outbox.Lease
		ms int64
	)
	if err := s.DB.QueryRowContext(ctx, s.q.leaseGet).Scan(&l.Owner, &l.Token, &ms); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return outbox.Lease{}, s.wrap("lease", errors.New("no lease row: run Migrate"))
		}
		return outbox.Lease{}, s.wrap("lease", err)
	}
	l.Until = FromMS(ms)
	return l, nil
}

// ReleaseLease implements outbox.Store.
func (s *Store) ReleaseLease(ctx context.Context, req outbox.LeaseRequest) error {
	if _, err := s.DB.ExecContext(ctx, s.q.release, req.Owner, req.Token); err != nil {
		return s.wrap("release lease", err)
	}
	return nil
}

// Cleanup implements outbox.Store with the dialect's DELETE.
func (s *Store) Cleanup(ctx context.Context, req outbox.CleanupRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, ctx.Err()
	}
	res, err := s.DB.ExecContext(ctx, s.q.cleanup, MS(req.Before), req.Limit)
	if err != nil {
		return 0, s.wrap("cleanup", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.wrap("cleanup", err)
	}
	return int(n), nil
}

// Stats implements outbox.Inspector.
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	var (
		st     outbox.Stats
		oldest sql.NullInt64
		until  int64
	)
	err := s.DB.QueryRowContext(ctx, s.q.stats).Scan(&st.Pending, &st.Parked, &st.Published, &oldest,
		&st.Lease.Owner, &st.Lease.Token, &until)
	if err != nil {
		return outbox.Stats{}, s.wrap("stats", err)
	}
	if oldest.Valid {
		st.OldestPending = FromMS(oldest.Int64)
	}
	st.Lease.Until = FromMS(until)
	if st.Lease.Token == 0 {
		st.Lease = outbox.Lease{} // never taken
	}
	return st, nil
}

// List implements outbox.Inspector.
func (s *Store) List(ctx context.Context, f outbox.ListFilter) ([]outbox.Record, error) {
	state, ok := map[outbox.State]string{
		"":                    "1 = 1",
		outbox.StatePending:   "published_at IS NULL AND parked = 0",
		outbox.StateParked:    "published_at IS NULL AND parked <> 0",
		outbox.StatePublished: "published_at IS NOT NULL",
	}[f.State]
	if !ok {
		return nil, fmt.Errorf("%s: list: unknown state %q", s.d.Name, f.State)
	}
	hint := ""
	if f.State == outbox.StatePending || f.State == outbox.StateParked {
		hint = s.d.Pending
	}
	q := strings.NewReplacer("{{HINT}}", hint, "{{STATE}}", state).Replace(s.q.list)
	rows, err := s.DB.QueryContext(ctx, q, f.AfterSeq, f.Destination, f.Destination, f.OrderingKey, f.OrderingKey, f.PageLimit())
	if err != nil {
		return nil, s.wrap("list", err)
	}
	recs, err := Scan(rows, f.PageLimit())
	if err != nil {
		return nil, s.wrap("list", err)
	}
	return recs, nil
}

// Retry implements outbox.Inspector.
func (s *Store) Retry(ctx context.Context, req outbox.RetryRequest) (int, error) {
	q, args := s.q.retry, []any{MS(req.Now)}
	if len(req.Seqs) > 0 {
		q += " AND seq IN (" + strings.TrimSuffix(strings.Repeat("?,", len(req.Seqs)), ",") + ")"
		for _, seq := range req.Seqs {
			args = append(args, seq)
		}
	}
	res, err := s.DB.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, s.wrap("retry", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, s.wrap("retry", err)
	}
	return int(n), nil
}
