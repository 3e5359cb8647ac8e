// Package pgxtx runs functions in pgx transactions whose BEGIN travels with
// the first statement instead of costing a round trip of its own. The
// PostgreSQL store's InTx (the transactional inbox) and entitypgx's InTx
// (entity mode) both run on it, and their tests are its tests
// (TestInTx* in store/postgres, TestInTxRollsBack in
// entity/internal/integration; for Defer, the store's
// TestMarkWithFirstStatement*).
package pgxtx

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Run runs fn in a transaction on conn with opts and commits when fn returns
// nil, rolling back otherwise (or when fn panics), like pgx.BeginTxFunc. The
// transaction begins with fn's first statement (see lazyTx); a function that
// runs none costs nothing. An error of the BEGIN itself comes back from that
// first statement. If the rollback fails the connection is left inside a
// transaction: pgxpool closes such a connection on release, never reuses it.
//
// fn may queue a statement with Defer. When that statement fails or changes
// no row, Run rolls the transaction back and runs fn once more in a new one,
// where Defer refuses (and Missed tells a statement that changed no row);
// the first run's error is dropped. See Defer.
func Run(ctx context.Context, conn *pgx.Conn, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return RunNoting(ctx, conn, opts, fn, nil)
}

// RunNoting is Run, calling notDone with the note that fn left with Note on
// a transaction that did not commit (fn failed, the commit failed, or the
// transaction was run again), if fn left one. A commit whose answer was
// lost may have committed: a note is a hint, never a record.
func RunNoting(ctx context.Context, conn *pgx.Conn, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error, notDone func(note uint64)) error {
	first := &lazyTx{conn: conn, opts: opts, deferOK: true, notDone: notDone}
	rerun, err := run(ctx, first, fn)
	if rerun {
		_, err = run(ctx, &lazyTx{conn: conn, opts: opts, missed: first.found, notDone: notDone}, fn)
	}
	return err
}

// Note leaves v (not 0) with tx, a transaction of RunNoting, for its
// notDone should the transaction not commit; a later note replaces an
// earlier one. Nothing for any other pgx.Tx.
func Note(tx pgx.Tx, v uint64) {
	if t, ok := tx.(*lazyTx); ok {
		t.note = v
	}
}

func run(ctx context.Context, tx *lazyTx, fn func(ctx context.Context, tx pgx.Tx) error) (rerun bool, err error) {
	defer func() {
		if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && err == nil {
			err = rerr
		}
		if (err != nil || rerun) && tx.note != 0 && tx.notDone != nil {
			tx.notDone(tx.note)
		}
	}()
	ferr := fn(ctx, tx)
	if ferr != nil && tx.pending != nil && tx.poison == nil {
		// fn failed before its first statement. Settle the deferred
		// statement anyway: when it would not have applied (an inbox
		// marker whose key is recorded), the rerun reports that instead
		// of fn's failure.
		_ = tx.flush(ctx)
	}
	if tx.poison != nil {
		return true, tx.poison
	}
	if ferr != nil {
		return false, ferr
	}
	err = tx.Commit(ctx)
	return tx.poison != nil, err
}

// ErrRerun is the error every statement of a transaction returns once the
// statement queued with Defer failed or changed no row. Run then rolls the
// transaction back and runs its function again.
var ErrRerun = errors.New("the statement sent ahead of this one did not apply: the transaction is rolled back and run again")

// Deferred is a statement for Defer.
type Deferred struct {
	SQL  string
	Args []any
	// Settle reads the statement's rows and reports whether it applied
	// and, when it did not, what Missed returns to the rerun: what the
	// statement found, so that the rerun need not ask again. An error
	// counts as a failure of the statement. nil: the statement applied
	// when it changed exactly one row (an INSERT .. ON CONFLICT DO
	// NOTHING that inserted).
	Settle func(rows pgx.Rows) (applied bool, missed any, err error)
}

// Defer queues d to be sent in one batch with BEGIN and the transaction's
// first statement, ahead of it, and reports whether it did: only a
// transaction of Run that has not begun, in Run's first run, takes one, and
// only one. When it fails or does not apply (see Deferred.Settle), the
// statement that carried it (its result discarded) and every later one
// return an error wrapping ErrRerun, Commit refuses, and Run runs the
// function again without deferring. If the function ends before any
// statement, the queued one is sent with the COMMIT's transaction, or on
// its own when the function failed.
func Defer(tx pgx.Tx, d Deferred) bool {
	t, ok := tx.(*lazyTx)
	if !ok || !t.deferOK || t.tx != nil || t.closed || t.pending != nil {
		return false
	}
	t.pending = &d
	return true
}

// Missed returns, in the rerun of Run's function after its deferred
// statement did not apply, what that statement's Settle reported it found;
// nil anywhere else (the first run, a rerun after a failure, any other
// pgx.Tx).
func Missed(tx pgx.Tx) any {
	if t, ok := tx.(*lazyTx); ok {
		return t.missed
	}
	return nil
}

// Outside returns the connection of tx when tx is a transaction of Run
// that has not begun (no statement sent, none deferred, not ended), for a
// statement whose answer may end the function before the transaction
// begins: a read that finds the function has nothing to do costs that one
// round trip, and the rollback that follows costs none. Whatever runs on
// the connection runs outside the transaction, in its own: only a read
// belongs there. nil for any other pgx.Tx, or once tx has begun.
func Outside(tx pgx.Tx) *pgx.Conn {
	if t, ok := tx.(*lazyTx); ok && t.tx == nil && !t.closed && t.pending == nil && t.poison == nil {
		return t.conn
	}
	return nil
}

// settle reads the result of the deferred statement d from br: whether it
// applied, what it found when it did not, and its error.
func settle(br pgx.BatchResults, d *Deferred) (applied bool, missed any, err error) {
	rows, err := br.Query()
	if err != nil {
		return false, nil, err
	}
	if d.Settle != nil {
		applied, missed, err = d.Settle(rows)
	}
	rows.Close()
	if rerr := rows.Err(); rerr != nil {
		return false, nil, rerr
	}
	if d.Settle == nil {
		applied = rows.CommandTag().RowsAffected() == 1
	}
	return applied, missed, err
}

// lazyTx is the pgx.Tx that Run hands to its function. It sends BEGIN with
// the first statement instead of before it: a first Exec, QueryRow or Query
// goes out as one batch with the BEGIN (pgx's Batch.BeginTx), and with the
// statement queued by Defer if there is one, so the transaction costs no
// round trip of its own. In idem.DoTx on the PostgreSQL store the
// first statement is always the marker, so the inbox adds no round trip to
// the business transaction beyond the marker itself; in entity mode it is
// the business insert. Every other method begins the transaction the
// ordinary way first; from then on everything is delegated to the pgx.Tx.
type lazyTx struct {
	conn    *pgx.Conn
	opts    pgx.TxOptions
	tx      pgx.Tx // nil until begun
	closed  bool   // committed or rolled back before anything began
	deferOK bool   // Defer may queue a statement
	pending *Deferred
	poison  error        // set when the deferred statement did not apply
	found   any          // what this run's deferred statement found when it did not apply
	missed  any          // in a rerun, what the first run's deferred statement found (Missed)
	note    uint64       // Note's
	notDone func(uint64) // RunNoting's
}

var _ pgx.Tx = (*lazyTx)(nil)

// begin starts the transaction with a round trip of its own, for methods
// that cannot carry it.
func (t *lazyTx) begin(ctx context.Context) (pgx.Tx, error) {
	if t.poison != nil {
		return nil, t.poison
	}
	if t.tx != nil {
		return t.tx, nil
	}
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	if t.pending != nil {
		if err := t.flush(ctx); err != nil {
			return nil, err
		}
		return t.tx, nil
	}
	tx, err := t.conn.BeginTx(ctx, t.opts)
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return tx, nil
}

// batched sends BEGIN, the deferred statement if one is queued, and one
// statement in one batch. The transaction is t.tx afterwards (closed if the
// BEGIN failed). The caller reads the statement's result from br and then
// closes br.
func (t *lazyTx) batched(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.BeginTx(t.opts)
	q := t.pending
	t.pending = nil
	if q != nil {
		b.Queue(q.SQL, q.Args...)
	}
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	if _, err := br.Exec(); err != nil { // the BEGIN
		br.Close()
		if q != nil {
			return nil, t.fail(nil, err)
		}
		return nil, err
	}
	if q != nil {
		if applied, missed, err := settle(br, q); err != nil || !applied {
			br.Close() // discards the statement's result
			return nil, t.fail(missed, err)
		}
	}
	return br, nil
}

// batchable reports whether a statement with args can go in a batch. pgx
// reads options from the head of the arguments; a batch honours only a
// QueryRewriter (pgx.NamedArgs) and would send any other option (a
// QueryExecMode, result formats) to the server as a parameter. Such a
// statement begins the transaction first and runs as on pgx's own Tx.
func batchable(args []any) bool {
	for _, a := range args {
		switch a.(type) {
		case pgx.QueryRewriter:
		case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			return false
		default:
			return true
		}
	}
	return true
}

// flush sends BEGIN and the deferred statement on their own.
func (t *lazyTx) flush(ctx context.Context) error {
	q := t.pending
	t.pending = nil
	b := &pgx.Batch{}
	b.BeginTx(t.opts)
	b.Queue(q.SQL, q.Args...)
	br := t.conn.SendBatch(ctx, b)
	t.tx = br.Tx()
	_, err := br.Exec() // the BEGIN
	var (
		applied bool
		missed  any
	)
	if err == nil {
		applied, missed, err = settle(br, q)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || !applied {
		return t.fail(missed, err)
	}
	return nil
}

// fail poisons the transaction after its deferred statement failed with
// cause, or (cause nil) did not apply, having found missed.
func (t *lazyTx) fail(missed any, cause error) error {
	if cause == nil {
		t.found = missed
		t.poison = ErrRerun
	} else {
		t.poison = fmt.Errorf("%w: %w", ErrRerun, cause)
	}
	return t.poison
}

// QueryRow implements pgx.Tx; when it is the first statement it carries the
// BEGIN.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil || t.closed || t.poison != nil || !batchable(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return errRow{err}
		}
		return tx.QueryRow(ctx, sql, args...)
	}
	br, err := t.batched(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br: br, row: br.QueryRow()}
}

// Exec implements pgx.Tx; when it is the first statement it carries the
// BEGIN.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.tx != nil || t.closed || t.poison != nil || !batchable(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return tx.Exec(ctx, sql, args...)
	}
	br, err := t.batched(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query implements pgx.Tx; when it is the first statement it carries the
// BEGIN. The batch ends when the rows do (Close, or Next returning false).
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.tx != nil || t.closed || t.poison != nil || !batchable(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return nil, err
		}
		return tx.Query(ctx, sql, args...)
	}
	br, err := t.batched(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// Begin implements pgx.Tx (a savepoint, as pgx does).
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Commit implements pgx.Tx. A transaction that never began has nothing to
// commit, unless a deferred statement is queued: that is sent first.
func (t *lazyTx) Commit(ctx context.Context) error {
	if t.poison != nil {
		return t.poison
	}
	if t.tx == nil && t.pending != nil {
		if err := t.flush(ctx); err != nil {
			return err
		}
	}
	if t.tx == nil {
		if t.closed {
			return pgx.ErrTxClosed
		}
		t.closed = true
		return nil
	}
	return t.tx.Commit(ctx)
}

// Rollback implements pgx.Tx. A deferred statement not sent yet is dropped.
func (t *lazyTx) Rollback(ctx context.Context) error {
	if t.tx == nil {
		t.pending = nil
		if t.closed {
			return pgx.ErrTxClosed
		}
		t.closed = true
		return nil
	}
	return t.tx.Rollback(ctx)
}

// CopyFrom implements pgx.Tx.
func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, cols, src)
}

// SendBatch implements pgx.Tx.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, err := t.begin(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return tx.SendBatch(ctx, b)
}

// LargeObjects implements pgx.Tx. It has no context to begin with, so it
// begins without one; if that fails, the returned LargeObjects report a
// closed transaction.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(context.Background())
	if err != nil {
		b := &pgx.Batch{}
		b.BeginTx(t.opts)
		return pgx.FailedBatchResults(b, err).Tx().LargeObjects()
	}
	return tx.LargeObjects()
}

// Prepare implements pgx.Tx.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// Conn implements pgx.Tx. Statements sent on the connection must be inside
// the transaction, as with pgx's own: Conn begins it first (with no context
// to begin with, as LargeObjects). If that fails, the error comes back from
// the transaction's next statement.
func (t *lazyTx) Conn() *pgx.Conn {
	if t.tx == nil && !t.closed && t.poison == nil {
		_, _ = t.begin(context.Background())
	}
	return t.conn
}

// batchRow is the first statement's row; scanning it closes the batch.
type batchRow struct {
	br  pgx.BatchResults
	row pgx.Row
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	cerr := r.br.Close()
	if err == nil || (errors.Is(err, pgx.ErrNoRows) && cerr != nil) {
		err = cerr
	}
	return err
}

// batchRows are the first statement's rows; when they end, so does the
// batch, and an error of its end is the rows' error.
type batchRows struct {
	pgx.Rows
	br   pgx.BatchResults
	done bool
	err  error
}

func (r *batchRows) finish() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Next() bool {
	if r.done {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *batchRows) Close() { r.finish() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
