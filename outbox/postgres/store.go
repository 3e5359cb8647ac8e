package outboxpostgres

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/internal/sqlname"
)

// DefaultTable is the outbox table used when Options.Table is empty.
const DefaultTable = "idem_outbox"

// DefaultNotifyInterval is the default of Options.NotifyInterval.
const DefaultNotifyInterval = 20 * time.Millisecond

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the outbox table, optionally schema-qualified
	// ("app.outbox"), plain identifiers only. Migrate creates it and its
	// lease table, Table+"_lease". Default idem_outbox.
	Table string
	// Limits bound what Enqueue takes.
	Limits outbox.Limits
	// Clock gives the CreatedAt of enqueued messages; default time.Now.
	// It should be the relay's clock.
	Clock func() time.Time
	// NoNotify turns the NOTIFY of Enqueue off: relays then find new
	// messages by polling alone.
	NoNotify bool
	// NotifyInterval is the least time between two NOTIFYs of one Store:
	// Enqueue sends one only when the last is older. PostgreSQL commits
	// the transactions that NOTIFY one at a time (a lock held through the
	// commit's WAL flush), so a NOTIFY per transaction would serialize
	// every enqueuing commit; the relay's listener fetches again
	// NotifyInterval after each notification, for the transactions that
	// committed meanwhile without one. Default DefaultNotifyInterval.
	NotifyInterval time.Duration
	// Channel is the LISTEN/NOTIFY channel. Default the table name as
	// given.
	Channel string
}

// Store is an outbox on a PostgreSQL table. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	opts    Options
	table   string // quoted
	lease   string // quoted
	channel string
	lockKey int32  // the first key of the ordering-key locks
	base    string // the table's name without its schema, for index names
	sql     statements

	lastNotify atomic.Int64 // unix nanoseconds of the last NOTIFY sent
}

var (
	_ outbox.Store     = (*Store)(nil)
	_ outbox.Inspector = (*Store)(nil)
	_ outbox.Notifier  = (*Store)(nil)
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are cut by the
// server without a word.
const maxIdentLen = 63

// New returns a store over pool. It validates opts (errors wrap
// outbox.ErrInvalidOptions) and does not touch the database: call Migrate
// once at start-up.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: outboxpostgres.New with a nil pool", outbox.ErrInvalidOptions)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	schema, base, err := sqlname.Split(opts.Table, true, maxIdentLen, "_published_idx")
	if err != nil {
		return nil, err
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.NotifyInterval < 0 {
		return nil, fmt.Errorf("%w: negative NotifyInterval", outbox.ErrInvalidOptions)
	}
	if opts.NotifyInterval == 0 {
		opts.NotifyInterval = DefaultNotifyInterval
	}
	if opts.Channel == "" {
		opts.Channel = opts.Table
	}
	if len(opts.Channel) > maxIdentLen {
		return nil, fmt.Errorf("%w: Channel %q is longer than %d bytes", outbox.ErrInvalidOptions, opts.Channel, maxIdentLen)
	}
	ident := func(name string) string {
		if schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{schema, name}.Sanitize()
	}
	h := fnv.New32a()
	h.Write([]byte(opts.Table))
	s := &Store{
		pool: pool, opts: opts, table: ident(base), lease: ident(base + "_lease"), channel: opts.Channel,
		lockKey: int32(h.Sum32()),
	}
	s.sql = buildStatements(s.table, s.lease)
	s.base = base
	return s, nil
}

// Table returns the quoted, possibly schema-qualified table name.
func (s *Store) Table() string { return s.table }

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

//go:embed schema.sql
var schemaSQL string

// lockClassMigrate is the first advisory-lock key of Migrate (the second
// is the table's hash); "io" 1.
const lockClassMigrate int32 = 0x696f0001

// Migrate creates the outbox table, its indexes and its lease table if
// they do not exist. It is safe to run from every instance at start-up:
// it runs in one transaction under an advisory lock.
func (s *Store) Migrate(ctx context.Context) error {
	idx := func(suffix string) string { return pgx.Identifier{s.base + suffix}.Sanitize() }
	var buf bytes.Buffer
	err := template.Must(template.New("schema").Parse(schemaSQL)).Execute(&buf, map[string]string{
		"Table": s.table, "Lease": s.lease, "IDIndex": idx("_id_idx"), "PendingIndex": idx("_pending_idx"),
		"FailedIndex": idx("_failed_idx"), "PublishedIndex": idx("_published_idx"),
	})
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockClassMigrate, s.lockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, buf.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxpostgres: migrate %s: %w", s.opts.Table, err)
	}
	return nil
}

// Enqueue writes msgs in tx, the caller's transaction, with one statement:
// an INSERT .. ON CONFLICT (id), so a message already held (a handler run
// twice) is left alone and the transaction never aborts on a unique
// violation. An id held with another fingerprint makes Enqueue return a
// *outbox.ConflictError: roll back. Invalid messages are refused
// with a *outbox.MessageError before anything is sent.
//
// Messages with an OrderingKey take a transaction-scoped advisory lock on
// the key (pg_advisory_xact_lock, in the same statement, before their Seq
// is drawn): a second transaction enqueuing on the same key waits until
// the first ends, so per key Seq order is commit order. Transactions that
// enqueue on several keys take them in one order within a call; across
// calls they may deadlock, and PostgreSQL then aborts one of them.
//
// Unless Options.NoNotify, the statement also sends NOTIFY on the store's
// channel (at most one per Options.NotifyInterval), delivered at commit,
// which wakes the relays at once.
//
// The statement costs the transaction one round trip; Queue sends it with
// the caller's own statements instead.
func (s *Store) Enqueue(ctx context.Context, tx pgx.Tx, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if tx == nil {
		return errors.New("outboxpostgres: Enqueue with a nil transaction")
	}
	recs, err := outbox.Prepare(ctx, micro(s.opts.Clock()), s.opts.Limits, msgs)
	if err != nil {
		return err
	}
	q, args := s.statement(recs)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return wrapErr("enqueue", err)
	}
	return answer(recs, rows)
}

// Queue adds the enqueue of msgs to b, a batch the caller sends in its
// transaction (tx.SendBatch), so the messages travel with the business
// statements and cost no round trip of their own. Invalid messages are
// refused at once, with a *outbox.MessageError; a conflict comes back from
// the batch's Close (or from reading the results up to this statement), a
// *outbox.ConflictError: roll back. Everything else is as for Enqueue.
//
//	b := &pgx.Batch{}
//	b.Queue(`INSERT INTO charges (order_id, amount) VALUES ($1, $2)`, id, amount)
//	if err := ob.Queue(ctx, b, outbox.Message{Destination: "billing.charged", Payload: body}); err != nil {
//		return err
//	}
//	return tx.SendBatch(ctx, b).Close()
func (s *Store) Queue(ctx context.Context, b *pgx.Batch, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if b == nil {
		return errors.New("outboxpostgres: Queue with a nil batch")
	}
	recs, err := outbox.Prepare(ctx, micro(s.opts.Clock()), s.opts.Limits, msgs)
	if err != nil {
		return err
	}
	q, args := s.statement(recs)
	b.Queue(q, args...).Query(func(rows pgx.Rows) error { return answer(recs, rows) })
	return nil
}

// statement is the enqueue statement for recs with its arguments: a plain
// insert unless it takes ordering-key locks or NOTIFYs.
func (s *Store) statement(recs []outbox.Record) (string, []any) {
	var locks []int32
	seen := map[int32]bool{}
	for _, r := range recs {
		if k := keyLock(r.OrderingKey); k != 0 && !seen[k] {
			seen[k] = true
			locks = append(locks, k)
		}
	}
	slices.Sort(locks)
	channel := s.notify()
	plain := len(locks) == 0 && channel == ""
	var args []any
	if len(recs) == 1 {
		r := recs[0]
		args = []any{r.ID, r.Destination, r.RoutingKey, r.OrderingKey, outbox.EncodeHeaders(r.Headers),
			nonNil(r.Payload), r.Fingerprint, optional(r.NotBefore), r.CreatedAt}
	} else {
		args = columns(recs)
	}
	switch {
	case plain && len(recs) == 1:
		return s.sql.insertOne, args
	case plain:
		return s.sql.insertMany, args
	case len(recs) == 1:
		return s.sql.enqueueOne, append(args, channel, s.lockKey, locks)
	}
	return s.sql.enqueueMany, append(args, channel, s.lockKey, locks)
}

// answer reads the enqueue statement's rows: the messages inserted, and
// those held with another fingerprint, the first of which is the error.
func answer(recs []outbox.Record, rows pgx.Rows) error {
	defer rows.Close()
	fp := make(map[string]string, len(recs))
	for _, r := range recs {
		fp[r.ID] = r.Fingerprint
	}
	var conflict error
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return wrapErr("enqueue", err)
		}
		id, _ := vals[0].(string)
		stored, _ := vals[1].(string)
		if want, ok := fp[id]; ok && stored != want && conflict == nil {
			conflict = &outbox.ConflictError{ID: id, Fingerprint: want, Stored: stored}
		}
	}
	if err := rows.Err(); err != nil {
		return wrapErr("enqueue", err)
	}
	return conflict
}

// notify returns the channel to NOTIFY, or "" when this call should not:
// NOTIFY is off, or the last one is younger than NotifyInterval.
func (s *Store) notify() string {
	if s.opts.NoNotify {
		return ""
	}
	now := time.Now().UnixNano()
	last := s.lastNotify.Load()
	if now-last < int64(s.opts.NotifyInterval) || !s.lastNotify.CompareAndSwap(last, now) {
		return ""
	}
	return s.channel
}

// columns are the message arguments ($1..$9) of the statements for many
// messages: one array per column, then the creation time.
func columns(recs []outbox.Record) []any {
	n := len(recs)
	var (
		ids, dests, rks, oks, hs, fps = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads                      = make([][]byte, n)
		notBefore                     = make([]*time.Time, n)
	)
	for i, r := range recs {
		ids[i], dests[i], rks[i], oks[i] = r.ID, r.Destination, r.RoutingKey, r.OrderingKey
		hs[i], fps[i], payloads[i] = outbox.EncodeHeaders(r.Headers), r.Fingerprint, nonNil(r.Payload)
		notBefore[i] = optional(r.NotBefore)
	}
	return []any{ids, dests, rks, oks, hs, payloads, fps, notBefore, recs[0].CreatedAt}
}

// keyLock is the second advisory-lock key of an ordering key (0 for none,
// which takes no lock). Keys colliding on it only wait for each other.
func keyLock(key string) int32 {
	if key == "" {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	if v := int32(h.Sum32()); v != 0 {
		return v
	}
	return 1
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// optional is a time as a nullable column, at PostgreSQL's precision: nil
// for the zero time.
func optional(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = micro(t)
	return &t
}

// micro truncates to PostgreSQL's precision, so that times read back equal
// those written.
func micro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// wrapErr names the operation; the driver's error stays reachable with
// errors.As. A data exception (SQLSTATE class 22) is an
// *idem.InvalidDataError: permanent.
func wrapErr(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		return &idem.InvalidDataError{Op: "outbox " + op, Err: fmt.Errorf("outboxpostgres: %w", err)}
	}
	return fmt.Errorf("outboxpostgres: %s: %w", op, err)
}
