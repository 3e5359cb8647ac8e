// Package memory is an in-process idem.Store: for tests, examples and
// single-process programs that accept losing their dedup state on restart.
//
// Records live in a map behind one mutex; every operation is atomic. It
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
	"github.com/idemgo/idem/store/storekit"
)

type rkey struct{ scope, id string }

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	mu   sync.Mutex
	recs map[rkey]*idem.Record
	// Records are made in blocks, and a swept record's place is taken by
	// the next new one: a claim of a new key then costs no allocation of
	// its own (the store hands out copies, never these pointers).
	block []idem.Record
	spare []*idem.Record
}

// recordBlock is how many records one allocation makes room for.
const recordBlock = 64

var (
	_ idem.Store          = (*Store)(nil)
	_ storekit.BatchStore = (*Store)(nil)
	_ idem.Inspector      = (*Store)(nil)
)

// New returns an empty store.
func New() *Store { return &Store{recs: make(map[rkey]*idem.Record)} }

func keyOf(k idem.Key) rkey { return rkey{k.Scope, k.StoredID()} }

func clone(r idem.Record) idem.Record {
	r.Result = bytes.Clone(r.Result)
	return r
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
	return s.claimLocked(req), nil
}

func (s *Store) claimLocked(req idem.ClaimRequest) idem.Claim {
	k := keyOf(req.Key)
	cur := s.recs[k]
	c, write := storekit.ApplyClaim(cur, req)
	if write {
		if cur == nil {
			cur = s.newRecord()
			s.recs[k] = cur
		}
		*cur = c.Record
	}
	c.Record = clone(c.Record)
	return c
}

// newRecord returns room for a new record. Called with mu held.
func (s *Store) newRecord() *idem.Record {
	if n := len(s.spare); n > 0 {
		r := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return r
	}
	if len(s.block) == 0 {
		s.block = make([]idem.Record, recordBlock)
	}
	r := &s.block[0]
	s.block = s.block[1:]
	return r
}

// ClaimBatch implements storekit.BatchStore: the whole batch under one lock.
// Every request is prepared first, so a rejected one (or a repeated key,
// idem.ErrDuplicateKeyInBatch) writes nothing.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	prepared, err := storekit.PrepareClaimBatch(reqs)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]idem.Claim, len(prepared))
	for i, r := range prepared {
		out[i] = s.claimLocked(r)
	}
	return out, nil
}

// owned returns the record held in progress with token, or nil.
func (s *Store) owned(k idem.Key, token int64) *idem.Record {
	r := s.recs[keyOf(k)]
	if r == nil || r.State != idem.StateInProgress || r.Token != token {
		return nil
	}
	return r
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
	r := s.owned(req.Key, req.Token)
	if r == nil {
		return idem.ErrLeaseLost
	}
	r.State, r.Result, r.ExpiresAt, r.UpdatedAt = idem.StateCompleted, bytes.Clone(req.Result), req.ExpiresAt, req.Now
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
	r := s.owned(req.Key, req.Token)
	if r == nil {
		return idem.ErrLeaseLost
	}
	r.State, r.LeaseUntil, r.UpdatedAt = idem.StateReleased, req.Now, req.Now
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
	r := s.owned(req.Key, req.Token)
	if r == nil {
		return idem.ErrLeaseLost
	}
	r.LeaseUntil, r.ExpiresAt, r.UpdatedAt = req.LeaseUntil, storekit.Later(r.ExpiresAt, req.LeaseUntil), req.Now
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[keyOf(key)]
	if r == nil {
		return idem.Record{}, idem.ErrNotFound
	}
	return clone(*r), nil
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
	n := 0
	for k, r := range s.recs {
		if n >= req.Limit {
			break
		}
		if r.Expired(req.Now) {
			delete(s.recs, k)
			*r = idem.Record{}
			s.spare = append(s.spare, r)
			n++
		}
	}
	return n, nil
}

// Len returns the number of records held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// List implements idem.Inspector.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit := f.PageLimit()
	s.mu.Lock()
	var out []idem.Record
	for _, r := range s.recs {
		if storekit.Match(f, *r) {
			out = append(out, clone(*r))
		}
	}
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
	for _, r := range s.recs {
		st := by[r.Scope]
		if st == nil {
			st = &idem.ScopeStats{Scope: r.Scope}
			by[r.Scope] = st
		}
		storekit.AddStats(st, *r, now)
	}
	s.mu.Unlock()
	out := make([]idem.ScopeStats, 0, len(by))
	for _, st := range by {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}
