package kafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Stream checkpoints: the partition's position is stored in the business
// database, in the transaction of the record's effects, and the consumer
// starts each assigned partition from it. See HandleCheckpoint and the
// package doc.

// DefaultCheckpointTable is the checkpoint table when Checkpoints.Table is
// empty.
const DefaultCheckpointTable = "idem_kafka_checkpoints"

// ErrInvalidTable is wrapped (with idem.ErrInvalidOptions) by the error
// for a Checkpoints.Table that is not a plain SQL identifier.
var ErrInvalidTable = errors.New("kafka: invalid checkpoint table name")

// Checkpoints say where HandleCheckpoint keeps positions, and whether it
// marks each record's key too. The zero value keeps positions in
// DefaultCheckpointTable and marks keys.
type Checkpoints struct {
	// Table holds one row per (scope, topic, partition): the next offset
	// to process, and when it was written. It lives in the database of
	// the guard's store; create it with Migrate. A plain identifier
	// (letters, digits, underscores, not starting with a digit) of at most
	// 63 bytes, optionally qualified by a schema (PostgreSQL), database
	// (MySQL) or attached database (SQLite) of the same form:
	// "billing.checkpoints". Default DefaultCheckpointTable.
	Table string

	// NoKeys keeps the position only: no idem record per message, so
	// nothing grows with the stream, and records need no key. Redelivery
	// (a crash, a rebalance, a lost offset commit) is still applied once;
	// a message the producer wrote twice (an application re-send, a retry
	// without the idempotent producer) is two records at two offsets and
	// is applied twice. By default each record's key is also marked in
	// the same transaction (idem.DoTx), which catches those within the
	// guard's Retention.
	NoKeys bool
}

var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// table returns the parts of the validated table name: the table, or the
// qualifier and the table.
func (c Checkpoints) table() ([]string, error) {
	name := c.Table
	if name == "" {
		name = DefaultCheckpointTable
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: %w %q: at most one qualifier (schema.table)", idem.ErrInvalidOptions, ErrInvalidTable, name)
	}
	for _, p := range parts {
		switch {
		case !tableRE.MatchString(p):
			return nil, fmt.Errorf("%w: %w %q: use letters, digits and underscores, not starting with a digit",
				idem.ErrInvalidOptions, ErrInvalidTable, name)
		case len(p) > 63:
			return nil, fmt.Errorf("%w: %w %.20q…: a part longer than 63 bytes", idem.ErrInvalidOptions, ErrInvalidTable, name)
		}
	}
	if strings.HasPrefix(strings.ToLower(parts[len(parts)-1]), "sqlite_") {
		return nil, fmt.Errorf("%w: %w %q: names starting with sqlite_ are reserved by SQLite",
			idem.ErrInvalidOptions, ErrInvalidTable, name)
	}
	return parts, nil
}

// quote quotes each part of a validated name with q.
func quote(parts []string, q string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = q + p + q
	}
	return strings.Join(out, ".")
}

// Migrate creates the checkpoint table in the database of st, a store with
// transactions (store/postgres for pgx.Tx; store/sqlite and store/mysql for
// *sql.Tx), if it does not exist. Run it once before consuming, as the
// store's own Migrate. Over *sql.Tx the SQL is what SQLite and
// MySQL/MariaDB both take (on MySQL the table gets the server's default
// engine, InnoDB, which the position's atomicity needs). A table name that
// is not an identifier is an error wrapping ErrInvalidTable; a store
// without transactions, idem.ErrNoTx.
func (c Checkpoints) Migrate(ctx context.Context, st idem.Store) error {
	switch ts := st.(type) {
	case idem.TxStore[pgx.Tx]:
		return migrate(ctx, c, ts)
	case idem.TxStore[*sql.Tx]:
		return migrate(ctx, c, ts)
	}
	return fmt.Errorf("%w: %T has no pgx.Tx or *sql.Tx transactions for checkpoints", idem.ErrNoTx, st)
}

func migrate[Tx any](ctx context.Context, c Checkpoints, ts idem.TxStore[Tx]) error {
	d, err := dialect[Tx](c)
	if err != nil {
		return err
	}
	if err := ts.InTx(ctx, d.migrate); err != nil {
		return fmt.Errorf("kafka: create checkpoint table: %w", err)
	}
	return nil
}

// Positions returns the stored positions of scope's consumer on topic:
// the next offset to process, by partition. Partitions without a row
// (never processed under checkpoints) are absent. st is the guard's
// store, as for Migrate.
func (c Checkpoints) Positions(ctx context.Context, st idem.Store, scope, topic string) (map[int32]int64, error) {
	switch ts := st.(type) {
	case idem.TxStore[pgx.Tx]:
		return positions(ctx, c, ts, scope, topic)
	case idem.TxStore[*sql.Tx]:
		return positions(ctx, c, ts, scope, topic)
	}
	return nil, fmt.Errorf("%w: %T has no pgx.Tx or *sql.Tx transactions for checkpoints", idem.ErrNoTx, st)
}

func positions[Tx any](ctx context.Context, c Checkpoints, ts idem.TxStore[Tx], scope, topic string) (map[int32]int64, error) {
	d, err := dialect[Tx](c)
	if err != nil {
		return nil, err
	}
	var out map[int32]int64
	err = ts.InTx(ctx, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = d.positions(ctx, tx, scope, topic)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kafka: read checkpoints of %s: %w", topic, err)
	}
	return out, nil
}

// HandleCheckpoint runs fn inside a transaction of the guard's store
// together with the record's position: the row of its (scope, topic,
// partition) in cp.Table moves past the record in the transaction of fn's
// writes, so the effects and the position commit together, or neither
// does. On assignment the consumer starts each partition from its stored
// position (Kafka's committed offset is kept up to date for monitoring,
// but is not what it resumes from), so a record whose effects committed is
// not applied again after a crash before the offset commit, a rebalance, or
// a lost or reset group offset.
//
// The scope is the guard's (the consumer group, by default): consumers
// sharing a scope share positions. One writer per partition is what Kafka's
// group gives; a former owner still running a record (a zombie that has not
// noticed it lost the partition) is fenced by the row: its transaction
// waits for the new owner's, finds the position past its record, and rolls
// back, reported as a duplicate. The position's statement comes before
// fn's in the transaction, so fn never runs for a record already applied.
//
// By default the record's key is also marked in the same transaction
// (idem.DoTx: as HandleTx, with a duplicate or conflict decided by the
// marker); with cp.NoKeys the position is all that is stored (see
// Checkpoints.NoKeys for what each covers). fn's errors are as for
// HandleTx: an error rolls everything back and the record is retried,
// idem.Permanent dead-letters it (the position then moves past it in a
// transaction of its own, once the dead letter is acknowledged), and
// idem.ErrDuplicate or idem.ErrSuperseded roll back and acknowledge it (as
// does a duplicate key; the position moves past it on its own too, or the
// record is retried). fn's context carries the key when keys are marked.
//
// The guard's store must implement idem.TxStore[Tx] for Tx pgx.Tx
// (store/postgres) or *sql.Tx (store/sqlite, store/mysql); create the
// table with cp.Migrate. The client must be built with ClientOptions,
// whose AdjustFetchOffsetsFn seeks. NewConsumer refuses a mismatch, a table
// name that is not an identifier, and a nil fn. Records are never claimed
// ahead in batches.
func HandleCheckpoint[Tx any](cp Checkpoints, fn func(ctx context.Context, tx Tx, rec *kgo.Record) error) Handler {
	h := &cpHandler[Tx]{cp: cp, fn: fn}
	h.d, h.err = dialect[Tx](cp)
	return Handler{cp: h}
}

// checkpointer is a HandleCheckpoint handler, whatever its Tx.
type checkpointer interface {
	check(g *idem.Guard) error
	// run applies rec and moves the position past it, in one transaction.
	run(ctx context.Context, g *idem.Guard, rec *kgo.Record) (idem.Result, error)
	// pass moves the position past rec, done without its transaction
	// committing (a dead letter, a duplicate).
	pass(ctx context.Context, g *idem.Guard, rec *kgo.Record) error
	// positions reads the stored positions of the guard's scope on topic.
	positions(ctx context.Context, g *idem.Guard, topic string) (map[int32]int64, error)
}

type cpHandler[Tx any] struct {
	cp  Checkpoints
	fn  func(ctx context.Context, tx Tx, rec *kgo.Record) error
	d   cpSQL[Tx]
	err error // from dialect: a bad table name or an unsupported Tx
}

func (h *cpHandler[Tx]) check(g *idem.Guard) error {
	switch {
	case h.fn == nil:
		return fmt.Errorf("%w: %w", idem.ErrInvalidOptions, broker.ErrNoHandler)
	case h.err != nil:
		return h.err
	case g == nil:
		return fmt.Errorf("%w: nil guard", idem.ErrInvalidOptions)
	}
	if _, ok := g.Store().(idem.TxStore[Tx]); !ok {
		var zero Tx
		return fmt.Errorf("%w: %w: checkpoints need the guard's store to have %T transactions; %T has none",
			idem.ErrInvalidOptions, idem.ErrNoTx, zero, g.Store())
	}
	return nil
}

// errBehind rolls back the transaction of a record the stored position is
// already past.
var errBehind = errors.New("kafka: the checkpoint is past the record")

func (h *cpHandler[Tx]) run(ctx context.Context, g *idem.Guard, rec *kgo.Record) (idem.Result, error) {
	ts := g.Store().(idem.TxStore[Tx]) // checked by check
	scope := g.Options().Scope
	var (
		fnErr  error // fn's error in the transaction's last run
		behind bool  // the position was past rec already
	)
	apply := func(ctx context.Context, tx Tx) error {
		fnErr, behind = nil, false
		moved, err := h.d.advance(ctx, tx, scope, rec)
		if err != nil {
			return &idem.StoreError{Op: "checkpoint", Err: err}
		}
		if !moved {
			behind = true
			return errBehind
		}
		fnErr = h.fn(ctx, tx, rec)
		return fnErr
	}
	var (
		res idem.Result
		err error
	)
	if h.cp.NoKeys {
		err = ts.InTx(ctx, apply)
		res, err = settle(err, fnErr)
	} else {
		res, err = idem.DoTx(ctx, g, MessageOf(rec), func(ctx context.Context, tx Tx) ([]byte, error) {
			if err := apply(ctx, tx); errors.Is(err, errBehind) {
				return nil, idem.ErrDuplicate // applied before: roll back and ack
			} else if err != nil {
				return nil, err
			}
			return nil, nil
		})
		if res.Outcome == idem.OutcomeFailed && fnErr == nil && err != nil {
			res.Outcome = idem.OutcomeStoreError // the position's statement failed, not fn
		}
	}
	if err == nil && !behind && (res.Outcome == idem.OutcomeDuplicate || res.Outcome == idem.OutcomeSuperseded) {
		// Done, and rolled back (the key's marker, or fn, found the
		// effect in place): the position moves past it on its own, or
		// the record is retried, so that the position never lags a
		// record acknowledged.
		if perr := h.pass(ctx, g, rec); perr != nil {
			return idem.Result{Key: res.Key, Outcome: idem.OutcomeStoreError}, &idem.StoreError{Op: "checkpoint", Err: perr}
		}
	}
	return res, err
}

// settle maps the end of a NoKeys transaction (InTx's error, and fn's in
// its last run) to the guard's vocabulary, as idem.DoTx would.
func settle(err, fnErr error) (idem.Result, error) {
	var res idem.Result
	switch {
	case err == nil:
		res.Outcome = idem.OutcomeProcessed
	case errors.Is(err, errBehind), errors.Is(err, idem.ErrDuplicate) && fnErr != nil:
		res.Outcome, err = idem.OutcomeDuplicate, nil
		var de *idem.DuplicateError
		if fnErr != nil && errors.As(fnErr, &de) {
			res.Value = de.Result
		}
	case errors.Is(err, idem.ErrSuperseded) && fnErr != nil:
		res.Outcome, err = idem.OutcomeSuperseded, nil
	case fnErr != nil:
		switch {
		case errors.Is(fnErr, idem.ErrConflict):
			res.Outcome = idem.OutcomeConflict
		case idem.IsPermanent(fnErr):
			res.Outcome = idem.OutcomePermanent
		default:
			res.Outcome = idem.OutcomeFailed
		}
		err = fnErr
	default: // begin, the position's statement, or the commit
		res.Outcome = idem.OutcomeStoreError
		var se *idem.StoreError
		if !errors.As(err, &se) {
			err = &idem.StoreError{Op: "commit", Err: err}
		}
	}
	return res, err
}

func (h *cpHandler[Tx]) pass(ctx context.Context, g *idem.Guard, rec *kgo.Record) error {
	ts := g.Store().(idem.TxStore[Tx])
	scope := g.Options().Scope
	return ts.InTx(ctx, func(ctx context.Context, tx Tx) error {
		_, err := h.d.advance(ctx, tx, scope, rec) // already past it: nothing to do
		return err
	})
}

func (h *cpHandler[Tx]) positions(ctx context.Context, g *idem.Guard, topic string) (map[int32]int64, error) {
	return positions(ctx, h.cp, g.Store().(idem.TxStore[Tx]), g.Options().Scope, topic)
}

// resume is the client's AdjustFetchOffsetsFn for c: a partition just
// assigned starts from its stored position when it has one. An error
// (the database is down) fails the assignment, which the client retries
// by rejoining the group; nothing is consumed from the fetched offsets
// meanwhile.
func (c *Consumer) resume(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if c.h.cp == nil {
		return offsets, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.g.Options().StoreTimeout)
	defer cancel()
	for topic, parts := range offsets {
		pos, err := c.h.cp.positions(ctx, c.g, topic)
		if err != nil {
			c.reportError(err)
			return nil, err
		}
		for n := range parts {
			if next, ok := pos[n]; ok {
				parts[n] = kgo.NewOffset().At(next) // no epoch: the stored position is not the group's commit
			}
		}
	}
	return offsets, nil
}

// passCheckpoint moves the position past rec, which was dead-lettered, so
// that the partition's next owner does not dead-letter it again. A
// failure is reported and otherwise harmless: the next record's
// transaction moves the position past both.
func (c *Consumer) passCheckpoint(ctx context.Context, rec *kgo.Record) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.g.Options().StoreTimeout)
	defer cancel()
	if err := c.h.cp.pass(ctx, c.g, rec); err != nil {
		c.reportError(fmt.Errorf("kafka: checkpoint past the dead letter of %s/%d at offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err))
	}
}
