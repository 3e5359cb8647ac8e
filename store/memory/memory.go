// Package memory is an in-process idem.Store: for tests, examples and
// single-process programs that accept losing their dedup state on restart.
//
// Records live in a table behind one mutex; every operation is atomic. It
// implements idem.Store, storekit.BatchStore and idem.Inspector, with the record
// rules of the idem.Store contract (storekit.ApplyClaim): every time comes from
// the request (the store reads no clock); a key's first record takes the
// request's random NewToken, so a token from a swept lifetime never matches a
// later owner's; a released record keeps its fingerprint; Renew carries the
// record's expiry with the lease, and neither an expiry nor a Sweep removes
// an in-progress record whose lease is live. Requests go through their
// Prepare first: one without its times is an *idem.InvalidDataError.
package memory

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/claimcheck"
	"github.com/idemgo/idem/store/storekit"
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	mu sync.Mutex
	t  *table
}

var (
	_ idem.Store          = (*Store)(nil)
	_ storekit.BatchStore = (*Store)(nil)
	_ idem.Inspector      = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{t: newTable()} }

func init() {
	// Every call answers from memory: a guard bounds none of them with
	// its StoreTimeout.
	claimcheck.InMemory = func(s any) bool { _, ok := s.(*Store); return ok }
}

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimLocked(&req), nil
}

func (s *Store) claimLocked(req *idem.ClaimRequest) idem.Claim {
	t := s.t
	sc, _ := t.scope(req.Key.Scope, true)
	id := req.Key.StoredID()
	i, at := t.find(sc, id)
	var cur *idem.Record
	if i >= 0 {
		r := t.record(i, req.Key.Scope, id, req.Fingerprint)
		cur = &r
	}
	c, write := storekit.ApplyClaim(cur, *req)
	if write {
		if i < 0 {
			t.insert(sc, at, &c.Record)
		} else {
			t.write(i, &c.Record)
		}
	}
	c.Record.Result = bytes.Clone(c.Record.Result)
	return c
}

// ClaimBatch implements storekit.BatchStore: the whole batch under one lock.
// Every request is checked first, so a rejected one (or a repeated key,
// idem.ErrDuplicateKeyInBatch) writes nothing. Each is prepared again as
// it is claimed rather than copied whole beforehand: a guard's requests
// need no checks, and a copy of the batch was an allocation the size of
// the batch.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := storekit.CheckBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	for i := range reqs {
		if _, err := storekit.PrepareClaim(reqs[i]); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]idem.Claim, len(reqs))
	for i := range reqs {
		r, _ := storekit.PrepareClaim(reqs[i]) // as it was a moment ago
		out[i] = s.claimLocked(&r)
	}
	return out, nil
}

// owned returns the slot of k held in progress with token, or -1.
func (s *Store) owned(k idem.Key, token int64) int32 {
	i := s.t.lookup(k)
	if i < 0 {
		return -1
	}
	if r := s.t.at(i); s.t.states[r.state-1] != idem.StateInProgress || r.token != token {
		return -1
	}
	return i
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.owned(req.Key, req.Token)
	if i < 0 {
		return idem.ErrLeaseLost
	}
	t := s.t
	t.setResult(i, bytes.Clone(req.Result))
	r := t.at(i)
	r.state, r.expires, r.updated = t.stateCode(idem.StateCompleted), t.stamp(req.ExpiresAt), t.stamp(req.Now)
	return nil
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := storekit.PrepareRelease(req); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.owned(req.Key, req.Token)
	if i < 0 {
		return idem.ErrLeaseLost
	}
	t := s.t
	r := t.at(i)
	r.state, r.lease, r.updated = t.stateCode(idem.StateReleased), t.stamp(req.Now), t.stamp(req.Now)
	return nil
}

// Renew implements idem.Store. The record's expiry moves with the lease
// (never earlier than it was), so a renewed in-progress record outlives its
// retention for as long as its owner keeps renewing.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.owned(req.Key, req.Token)
	if i < 0 {
		return idem.ErrLeaseLost
	}
	t := s.t
	r := t.at(i)
	r.lease, r.expires, r.updated = t.stamp(req.LeaseUntil), t.stamp(storekit.Later(t.time(r.expires), req.LeaseUntil)), t.stamp(req.Now)
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.t.lookup(key)
	if i < 0 {
		return idem.Record{}, idem.ErrNotFound
	}
	r := s.t.full(i)
	r.Result = bytes.Clone(r.Result)
	return r, nil
}

// Sweep implements idem.Store: it deletes at most req.Limit expired records
// (none when Limit <= 0), never an in-progress one whose lease is live.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if req.Limit <= 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.t
	n := 0
	t.each(func(i int32) bool {
		r := t.at(i)
		// Record.Expired, on the slot.
		if exp := t.time(r.expires); t.states[r.state-1] != idem.StateInProgress && !exp.IsZero() && !req.Now.Before(exp) {
			t.remove(i)
			n++
		}
		return n < req.Limit
	})
	return n, nil
}

// Len returns the number of records held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.live
}

// List implements idem.Inspector.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.PageLimit()
	s.mu.Lock()
	var out []idem.Record
	s.t.each(func(i int32) bool {
		if r := s.t.full(i); storekit.Match(f, r) {
			r.Result = bytes.Clone(r.Result)
			out = append(out, r)
		}
		return true
	})
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].ID < out[j].ID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Stats implements idem.Inspector.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	by := map[string]*idem.ScopeStats{}
	s.t.each(func(i int32) bool {
		r := s.t.full(i)
		st := by[r.Scope]
		if st == nil {
			st = &idem.ScopeStats{Scope: r.Scope}
			by[r.Scope] = st
		}
		storekit.AddStats(st, r, now)
		return true
	})
	s.mu.Unlock()
	out := make([]idem.ScopeStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

// apply runs f on the record of k (nil when there is none) and writes the
// record back when f says so without an error. Called with mu held.
func (s *Store) apply(k idem.Key, f func(*idem.Record) (write bool, err error)) error {
	i := s.t.lookup(k)
	if i < 0 {
		_, err := f(nil)
		return err
	}
	r := s.t.full(i)
	write, err := f(&r)
	if err == nil && write {
		s.t.write(i, &r)
	}
	return err
}
