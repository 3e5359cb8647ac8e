// Package outboxmemory is an in-process outbox (tests, examples, a single
// process that publishes what it keeps in memory anyway). Its transactions
// are its own: Enqueue writes in a *Tx, and Commit makes the messages
// visible to the relay, in commit order. It is the reference the
// conformance suite (outbox/outboxtest) is checked against.
//
//	import outboxmemory "github.com/idemgo/idem/outbox/memory"
package outboxmemory

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/idemgo/idem/outbox"
)

// ErrTxDone is returned by a *Tx used after Commit or Rollback.
var ErrTxDone = errors.New("outboxmemory: transaction already committed or rolled back")

// Options configure a Store. The zero value works.
type Options struct {
	Limits outbox.Limits
	Clock  func() time.Time // CreatedAt of enqueued messages; default time.Now
}

// Store is an in-memory outbox. It is safe for concurrent use.
type Store struct {
	opts Options

	mu      sync.Mutex
	recs    []*outbox.Record // ascending Seq
	byID    map[string]*outbox.Record
	seq     int64
	lease   outbox.Lease
	waiters map[chan struct{}]struct{}
}

var (
	_ outbox.Store     = (*Store)(nil)
	_ outbox.Inspector = (*Store)(nil)
	_ outbox.Notifier  = (*Store)(nil)
)

// New returns an empty store.
func New(opts Options) (*Store, error) {
	if err := opts.Limits.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &Store{opts: opts, byID: map[string]*outbox.Record{}, waiters: map[chan struct{}]struct{}{}}, nil
}

// Tx is one transaction: what Enqueue writes in it becomes visible at
// Commit, or never.
type Tx struct {
	s    *Store
	recs []outbox.Record
	done bool
}

// Begin starts a transaction.
func (s *Store) Begin() *Tx { return &Tx{s: s} }

// InTx runs fn in a new transaction and commits when fn returns nil.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	tx := s.Begin()
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Enqueue writes msgs in tx (see outbox.Store for the rules).
func (s *Store) Enqueue(ctx context.Context, tx *Tx, msgs ...outbox.Message) error {
	recs, err := outbox.Prepare(ctx, s.opts.Clock(), s.opts.Limits, msgs)
	if err != nil {
		return err
	}
	if tx == nil || tx.s != s {
		return errors.New("outboxmemory: Enqueue with a transaction of another store")
	}
	if tx.done {
		return ErrTxDone
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var add []outbox.Record
	for _, r := range recs {
		held := s.byID[r.ID]
		if held == nil {
			if i := slices.IndexFunc(tx.recs, func(p outbox.Record) bool { return p.ID == r.ID }); i >= 0 {
				held = &tx.recs[i]
			}
		}
		switch {
		case held == nil:
			add = append(add, r)
		case held.Fingerprint != r.Fingerprint:
			return &outbox.ConflictError{ID: r.ID, Fingerprint: r.Fingerprint, Stored: held.Fingerprint}
		}
	}
	tx.recs = append(tx.recs, add...)
	return nil
}

// Commit makes the transaction's messages visible, with Seqs in commit
// order. An id committed meanwhile by another transaction is kept as it
// is (or, with other content, the commit fails with a ConflictError and
// nothing of tx is kept).
func (tx *Tx) Commit() error {
	if tx.done {
		return ErrTxDone
	}
	tx.done = true
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var add []outbox.Record
	for _, r := range tx.recs {
		if held := s.byID[r.ID]; held != nil {
			if held.Fingerprint != r.Fingerprint {
				return &outbox.ConflictError{ID: r.ID, Fingerprint: r.Fingerprint, Stored: held.Fingerprint}
			}
			continue
		}
		add = append(add, r)
	}
	for _, r := range add {
		s.seq++
		r.Seq = s.seq
		p := &r
		s.recs = append(s.recs, p)
		s.byID[r.ID] = p
	}
	if len(add) > 0 {
		for w := range s.waiters {
			select {
			case w <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// Rollback drops the transaction's messages.
func (tx *Tx) Rollback() {
	tx.done = true
	tx.recs = nil
}

// Fetch implements outbox.Store.
func (s *Store) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []outbox.Record
	blocked := map[string]bool{}
	for _, r := range s.recs {
		if len(out) >= req.Limit {
			break
		}
		if !r.Pending() {
			continue
		}
		if slices.Contains(req.Exclude, r.Seq) {
			// Still pending: what it holds back in its key, the caller holds.
			if r.OrderingKey != "" && (r.Parked || r.NextAttemptAt.After(req.Now)) {
				blocked[r.OrderingKey] = true
			}
			continue
		}
		ready := !r.Parked && !r.NextAttemptAt.After(req.Now)
		if r.OrderingKey != "" {
			if blocked[r.OrderingKey] {
				continue
			}
			if !ready {
				blocked[r.OrderingKey] = true
			}
		}
		if ready {
			out = append(out, clone(*r))
		}
	}
	return out, nil
}

func clone(r outbox.Record) outbox.Record {
	r.Payload = slices.Clone(r.Payload)
	if r.Headers != nil {
		h := make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			h[k] = v
		}
		r.Headers = h
	}
	return r
}

func (s *Store) bySeq(seq int64) *outbox.Record {
	i, ok := slices.BinarySearchFunc(s.recs, seq, func(r *outbox.Record, seq int64) int {
		switch {
		case r.Seq < seq:
			return -1
		case r.Seq > seq:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return s.recs[i]
}

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seq := range seqs {
		if r := s.bySeq(seq); r != nil && r.Pending() {
			r.PublishedAt = now
		}
	}
	return nil
}

// MarkFailed implements outbox.Store.
func (s *Store) MarkFailed(ctx context.Context, fs []outbox.Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range fs {
		if r := s.bySeq(f.Seq); r != nil && r.Pending() {
			r.Attempts, r.NextAttemptAt, r.LastError, r.Parked = f.Attempts, f.NextAttemptAt, f.Error, f.Park
		}
	}
	return nil
}

// Lease implements outbox.Store.
func (s *Store) Lease(ctx context.Context, req outbox.LeaseRequest) (outbox.Lease, error) {
	if err := ctx.Err(); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.lease
	switch {
	case l.Owner == req.Owner && l.Token == req.Token && req.Token != 0 && req.Now.Before(l.Until):
		l.Until = req.Until
	case !req.Now.Before(l.Until):
		*l = outbox.Lease{Owner: req.Owner, Token: l.Token + 1, Until: req.Until}
	}
	return *l, nil
}

// ReleaseLease implements outbox.Store.
func (s *Store) ReleaseLease(ctx context.Context, req outbox.LeaseRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease.Owner == req.Owner && s.lease.Token == req.Token {
		s.lease.Until = time.Time{}
	}
	return nil
}

// Cleanup implements outbox.Store.
func (s *Store) Cleanup(ctx context.Context, req outbox.CleanupRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	s.recs = slices.DeleteFunc(s.recs, func(r *outbox.Record) bool {
		if n < req.Limit && !r.Pending() && r.PublishedAt.Before(req.Before) {
			n++
			delete(s.byID, r.ID)
			return true
		}
		return false
	})
	return n, nil
}

// Listen implements outbox.Notifier: wake is called after each commit of
// new messages.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	w := make(chan struct{}, 1)
	s.mu.Lock()
	s.waiters[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, w)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w:
			wake()
		}
	}
}

// List implements outbox.Inspector.
func (s *Store) List(ctx context.Context, f outbox.ListFilter) ([]outbox.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []outbox.Record
	for _, r := range s.recs {
		if len(out) >= f.PageLimit() {
			break
		}
		if f.Match(*r) {
			out = append(out, clone(*r))
		}
	}
	return out, nil
}

// Stats implements outbox.Inspector.
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	if err := ctx.Err(); err != nil {
		return outbox.Stats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := outbox.Stats{Lease: s.lease}
	for _, r := range s.recs {
		switch r.State() {
		case outbox.StatePublished:
			st.Published++
			continue
		case outbox.StateParked:
			st.Parked++
			continue
		}
		st.Pending++
		if st.OldestPending.IsZero() || r.CreatedAt.Before(st.OldestPending) {
			st.OldestPending = r.CreatedAt
		}
	}
	return st, nil
}

// Retry implements outbox.Inspector.
func (s *Store) Retry(ctx context.Context, req outbox.RetryRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if !r.Parked || !r.Pending() || (len(req.Seqs) > 0 && !slices.Contains(req.Seqs, r.Seq)) {
			continue
		}
		r.Parked, r.Attempts, r.NextAttemptAt = false, 0, req.Now
		n++
	}
	return n, nil
}
