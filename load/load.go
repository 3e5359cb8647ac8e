package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Defaults for Options.
const (
	DefaultBatchSize    = 1000
	DefaultMaxConflicts = 1000
)

// Options configure a Loader. Scope is required; the zero value of every
// other field is a sensible default.
type Options struct {
	// Scope names the load ("orders-import"): the scope of its markers with
	// Marked, and of the keys in its errors. Loads that must recognise each
	// other's rows (a file and its corrected re-send) share a scope; a scope
	// shared with a consumer would mix its rows with that consumer's
	// messages.
	Scope string
	// BatchSize is how many rows are claimed and written per statement and,
	// with Run, per transaction. Default DefaultBatchSize.
	BatchSize int
	// Retention is how long Marked's markers are kept: a row loaded again
	// within it is recognised. Keep it longer than any reload or overlap
	// can come (a monthly file re-sent next month). Default
	// idem.DefaultRetention. Writers that keep the key in the business row
	// (loadpgx.Table) never forget a row.
	Retention time.Duration
	// Clock stamps the markers (their retention); default time.Now.
	Clock func() time.Time
	// Total is the number of rows expected, for Progress; 0 when unknown.
	Total int
	// Progress, if not nil, is called after every committed batch and once
	// more at the end (Finished). Terminal renders it on a terminal.
	Progress func(Progress)
	// MaxConflicts bounds the conflicts listed in the Summary and the
	// ConflictError (all are counted). Default DefaultMaxConflicts;
	// negative: none listed.
	MaxConflicts int
	// OnConflict, if not nil, is called with every conflict, in input
	// order, as its batch commits (to log them all, or write them to a
	// rejects file).
	OnConflict func(Conflict)
}

func (o *Options) validate() error {
	if o.Scope == "" {
		return fmt.Errorf("%w: load Scope is required (it names the load's keys)", idem.ErrInvalidOptions)
	}
	if err := (idem.Key{Scope: o.Scope, ID: "x"}).Validate(); err != nil {
		return fmt.Errorf("%w: Scope: %v", idem.ErrInvalidOptions, err)
	}
	if o.BatchSize < 0 || o.Retention < 0 || o.Total < 0 {
		return fmt.Errorf("%w: BatchSize, Retention and Total must not be negative", idem.ErrInvalidOptions)
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Retention == 0 {
		o.Retention = idem.DefaultRetention
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxConflicts == 0 {
		o.MaxConflicts = DefaultMaxConflicts
	}
	return nil
}

// Transactor runs functions in transactions: InTx begins one, runs fn and
// commits when fn returns nil, rolling back otherwise; each call is a
// transaction of its own (Run relies on it: see Disposable). Every
// idem.TxStore (store/postgres, store/sqlite, entitypgx.Store, ...) is one.
type Transactor[Tx any] interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// Loader loads rows keyed one by one, in batches: reprocessing the same
// input writes nothing twice, and a row whose key is stored with other
// content is reported as a conflict, never written over or dropped
// silently. It is safe for concurrent use.
type Loader[Tx any] struct {
	db   Transactor[Tx]
	w    Writer[Tx]
	opts Options
}

// New returns a loader whose batches run in db's transactions and are
// written by w. Options are checked here; the error wraps
// idem.ErrInvalidOptions.
func New[Tx any](db Transactor[Tx], w Writer[Tx], opts Options) (*Loader[Tx], error) {
	if db == nil || w == nil {
		return nil, fmt.Errorf("%w: load needs a Transactor and a Writer", idem.ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Loader[Tx]{db: db, w: w, opts: opts}, nil
}

// Run loads every row of src, one transaction per batch: a load that stops
// (a crash, a cancelled context, a bad row) keeps the batches it committed,
// and running it again settles those as duplicates and goes on. The
// Summary counts the committed rows.
//
// Conflicts do not stop the load: the conflicting rows are left out, every
// other row is loaded, and Run returns a *ConflictError (errors.Is
// idem.ErrConflict) with the complete Summary. Other errors stop it: the
// source's, a row without a usable key (*RowError), the writer's or the
// database's (its batch rolled back).
func (l *Loader[Tx]) Run(ctx context.Context, src Source) (Summary, error) {
	return l.run(ctx, src, l.db.InTx, true)
}

// RunTx is Run inside the caller's transaction tx: every batch is claimed
// and written in it, and nothing is durable until the caller commits. After
// an error other than a *ConflictError, roll tx back. The Summary counts
// what tx holds.
func (l *Loader[Tx]) RunTx(ctx context.Context, tx Tx, src Source) (Summary, error) {
	return l.run(ctx, src, func(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
		return fn(ctx, tx)
	}, false)
}

// ErrRetryBatch is returned by a Writer whose cheap first try aborted the
// batch's transaction (a plain INSERT or COPY that met a stored key): the
// loader rolls that transaction back and runs the batch again in a new one,
// where Disposable reports false. Wrap the cause with it.
var ErrRetryBatch = errors.New("load: run the batch again without the fast path")

type disposableKey struct{}

// Disposable reports whether a Writer may abort the batch's transaction on
// a stored key and return ErrRetryBatch: true when the transaction is the
// batch's own (Run) and this is the batch's first try. A writer uses it to
// write a batch of new keys with the cheapest statement there is, which
// fails as a whole when one key exists; reloads and overlapping files then
// pay for the failed statement and the retry, so such a writer should stop
// trying for a while after one fails.
func Disposable(ctx context.Context) bool {
	d, _ := ctx.Value(disposableKey{}).(bool)
	return d
}

// batch is a run of rows the reader hands over, or the error that ended the
// source.
type batch struct {
	rows []Row
	err  error
}

func (l *Loader[Tx]) run(ctx context.Context, src Source, inTx func(context.Context, func(context.Context, Tx) error) error,
	ownTx bool) (Summary, error) {
	start := time.Now()
	var sum Summary
	report := func(finished bool) {
		sum.Elapsed = time.Since(start)
		if l.opts.Progress != nil {
			l.opts.Progress(Progress{Done: sum.Rows, Total: l.opts.Total, New: sum.New, Duplicate: sum.Duplicate,
				Conflict: sum.Conflict, Elapsed: sum.Elapsed, Finished: finished})
		}
	}
	// The next batch is read (and its rows hashed) while the database
	// works on this one.
	rctx, cancel := context.WithCancel(ctx)
	batches := make(chan batch, 1)
	go l.read(rctx, src, batches)
	defer func() {
		cancel()
		for range batches { // the reader is done with src before Run returns
		}
	}()

	for b := range batches {
		if len(b.rows) > 0 {
			var out settled
			p, err := l.prepare(b.rows)
			try := func(disposable bool) error {
				return inTx(context.WithValue(ctx, disposableKey{}, disposable), func(ctx context.Context, tx Tx) error {
					var err error
					out, err = l.settle(ctx, tx, p)
					return err
				})
			}
			if err == nil {
				err = try(ownTx)
				if ownTx && errors.Is(err, ErrRetryBatch) {
					err = try(false)
				}
			}
			if err != nil {
				report(true)
				return sum, err
			}
			sum.add(out, l.opts)
			report(false)
		}
		if b.err != nil {
			report(true)
			return sum, b.err
		}
	}
	report(true)
	if err := ctx.Err(); err != nil {
		// Cancelled while the reader waited to hand a batch over.
		return sum, err
	}
	if sum.Conflict > 0 {
		return sum, &ConflictError{Count: sum.Conflict, Conflicts: sum.Conflicts}
	}
	return sum, nil
}

// read hands src's rows to out in batches and closes it.
func (l *Loader[Tx]) read(ctx context.Context, src Source, out chan<- batch) {
	defer close(out)
	for {
		rows := make([]Row, 0, l.opts.BatchSize)
		var err error
		for len(rows) < l.opts.BatchSize {
			if err = ctx.Err(); err != nil {
				break
			}
			var r Row
			if r, err = src.Next(ctx); err != nil {
				break
			}
			rows = append(rows, r)
		}
		if errors.Is(err, io.EOF) {
			err = nil
			if len(rows) == 0 {
				return
			}
			select {
			case out <- batch{rows: rows}:
			case <-ctx.Done():
			}
			return
		}
		select {
		case out <- batch{rows: rows, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

type status uint8

const (
	statusNew status = iota + 1
	statusDuplicate
	statusConflict
)

// settled is what one batch did, in input order.
type settled struct {
	status    []status
	conflicts []Conflict
}

func (s *Summary) add(b settled, opts Options) {
	for _, st := range b.status {
		s.Rows++
		switch st {
		case statusNew:
			s.New++
		case statusDuplicate:
			s.Duplicate++
		}
	}
	for _, c := range b.conflicts {
		s.Conflict++
		if len(s.Conflicts) < opts.MaxConflicts {
			s.Conflicts = append(s.Conflicts, c)
		}
		if opts.OnConflict != nil {
			opts.OnConflict(c)
		}
	}
}

// prepared is a batch ready for its transaction: its rows' distinct keys
// in key order, and where each input row went.
type prepared struct {
	rows  []Row   // the input rows, in input order
	batch *Batch  // their distinct keys, sorted
	of    []int32 // input row -> index in batch.Rows of its key
	at    []int32 // index in batch.Rows -> the input row that holds it (the key's first)
}

// prepare checks rows and sorts their keys, before any transaction: a row
// the store cannot key refuses the batch (*RowError).
func (l *Loader[Tx]) prepare(rows []Row) (*prepared, error) {
	for i := range rows {
		r := &rows[i]
		if err := (idem.Key{Scope: l.opts.Scope, ID: r.Key}).Validate(); err != nil {
			return nil, &RowError{Row: r.N, Line: r.Line, Err: err}
		}
		r.Fingerprint = storekit.StoredFingerprint(r.Fingerprint)
	}
	order := make([]int32, len(rows))
	for i := range order {
		order[i] = int32(i)
	}
	// Stable: of the rows sharing a key, the first in the input comes
	// first and is the one written.
	slices.SortStableFunc(order, func(a, b int32) int { return strings.Compare(rows[a].Key, rows[b].Key) })
	now := l.opts.Clock() // one instant for the batch: stores send shared values once
	p := &prepared{
		rows:  rows,
		batch: &Batch{Rows: make([]Row, 0, len(rows)), Scope: l.opts.Scope, Now: now, ExpiresAt: now.Add(l.opts.Retention)},
		of:    make([]int32, len(rows)),
		at:    make([]int32, 0, len(rows)),
	}
	for _, i := range order {
		if u := len(p.batch.Rows) - 1; u >= 0 && p.batch.Rows[u].Key == rows[i].Key {
			p.of[i] = int32(u)
			continue
		}
		p.of[i] = int32(len(p.batch.Rows))
		p.at = append(p.at, i)
		p.batch.Rows = append(p.batch.Rows, rows[i])
	}
	return p, nil
}

// settle claims and writes one batch in tx. It may run again when the
// store runs tx's function again, so it keeps nothing outside its answer.
func (l *Loader[Tx]) settle(ctx context.Context, tx Tx, p *prepared) (settled, error) {
	uniq := p.batch.Rows
	claims, err := l.w.WriteBatch(ctx, tx, p.batch)
	if err != nil {
		return settled{}, err
	}
	if len(claims) != len(uniq) {
		return settled{}, fmt.Errorf("load: writer returned %d claims for %d rows", len(claims), len(uniq))
	}
	// holds[u] is the content uniq[u]'s key stands for once the batch
	// commits; wrote[u] whether this batch wrote it.
	holds := make([]string, len(uniq))
	wrote := make([]bool, len(uniq))
	for u, c := range claims {
		r := uniq[u]
		switch c.Outcome {
		case idem.ClaimAcquired:
			if conflicting(r.Fingerprint, c.Record.Fingerprint) {
				return settled{}, fmt.Errorf("load: row %d: writer wrote a row over other content: %w", r.N,
					&idem.ConflictError{Key: p.batch.Key(u), Fingerprint: r.Fingerprint, Record: c.Record})
			}
			wrote[u] = true
			holds[u] = r.Fingerprint
		case idem.ClaimDuplicate:
			holds[u] = c.Record.Fingerprint
		case idem.ClaimInProgress:
			return settled{}, &idem.StateError{Key: p.batch.Key(u), Record: c.Record, Err: idem.ErrInProgress}
		case idem.ClaimStale:
			return settled{}, &idem.StateError{Key: p.batch.Key(u), Record: c.Record, Err: idem.ErrStale}
		default:
			return settled{}, fmt.Errorf("load: row %d: unexpected claim outcome %v", r.N, c.Outcome)
		}
		if holds[u] == "" {
			holds[u] = r.Fingerprint
		}
	}
	out := settled{status: make([]status, len(p.rows))}
	for i, r := range p.rows {
		u := p.of[i]
		switch {
		case int(p.at[u]) == i && wrote[u]:
			out.status[i] = statusNew
		case conflicting(r.Fingerprint, holds[u]):
			out.status[i] = statusConflict
			c := Conflict{Row: r.N, Line: r.Line, Key: r.Key, Fingerprint: r.Fingerprint, Stored: holds[u]}
			if wrote[u] {
				c.Earlier = p.rows[p.at[u]].N
			}
			out.conflicts = append(out.conflicts, c)
		default:
			out.status[i] = statusDuplicate
		}
	}
	return out, nil
}
