package lincheck_test

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/storekit"
	"github.com/idemgo/idem/store/storetest/lincheck"
)

// flaw is one way a store can break the contract.
type flaw int

const (
	racyClaim            flaw = iota + 1 // reads and writes a claim in two steps: two claimers both acquire
	unfencedFinish                       // completes, releases and renews with any token
	leaseIgnored                         // takes over in-progress records whose lease is live
	tokenKept                            // a retake keeps the token: the zombie still matches
	forgetsContent                       // a released record takes the next claim's fingerprint
	losesLiveRecord                      // an in-progress record vanishes before its lease ends
	sweepsLive                           // Sweep deletes records that have not expired
	supersedesOwner                      // Supersede takes the content of a record in progress
	supersedeKeepsResult                 // a superseded record still replays the old content's result
)

// brokenStore is an idem.Store with one flaw, on a map behind a mutex.
type brokenStore struct {
	flaw  flaw
	mu    sync.Mutex
	recs  map[idem.Key]idem.Record
	calls int
}

func (s *brokenStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	cur, ok := s.recs[req.Key]
	if s.flaw == losesLiveRecord && ok && s.calls%7 == 0 {
		ok = false
	}
	if s.flaw == racyClaim {
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	var p *idem.Record
	if ok {
		p = &cur
	}
	if s.flaw == leaseIgnored && ok && cur.State == idem.StateInProgress {
		req.TakeOverStale, req.Now = true, cur.LeaseUntil
	}
	c, write := storekit.ApplyClaim(p, req)
	switch {
	case s.flaw == tokenKept && c.Retaken:
		c.Record.Token--
	case s.flaw == forgetsContent && ok && cur.State == idem.StateReleased && !cur.Expired(req.Now):
		c.Record.Fingerprint = req.Fingerprint
	}
	if write {
		s.recs[req.Key] = c.Record
	}
	return c, nil
}

// finish applies fn to the record held with token (any in-progress record
// when the flaw is unfencedFinish).
func (s *brokenStore) finish(key idem.Key, token int64, fn func(r *idem.Record)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	if !ok || r.State != idem.StateInProgress || (r.Token != token && s.flaw != unfencedFinish) {
		return idem.ErrLeaseLost
	}
	fn(&r)
	s.recs[key] = r
	return nil
}

func (s *brokenStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	return s.finish(req.Key, req.Token, func(r *idem.Record) {
		r.State, r.Result, r.ExpiresAt = idem.StateCompleted, bytes.Clone(req.Result), req.ExpiresAt
	})
}

func (s *brokenStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	return s.finish(req.Key, req.Token, func(r *idem.Record) { r.State, r.LeaseUntil = idem.StateReleased, req.Now })
}

func (s *brokenStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	return s.finish(req.Key, req.Token, func(r *idem.Record) {
		r.LeaseUntil, r.ExpiresAt = req.LeaseUntil, storekit.Later(r.ExpiresAt, req.LeaseUntil)
	})
}

func (s *brokenStore) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[req.Key]
	if !ok {
		return idem.ErrNotFound
	}
	if s.flaw == supersedesOwner && r.State == idem.StateInProgress && r.Token == req.Token {
		r.State = idem.StateCompleted // checked as a settled record
	}
	result := r.Result
	if err := storekit.ApplySupersede(&r, req); err != nil {
		return err
	}
	if s.flaw == supersedeKeepsResult {
		r.Result = result
	}
	s.recs[req.Key] = r
	return nil
}

func (s *brokenStore) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[key]
	if !ok {
		return idem.Record{}, idem.ErrNotFound
	}
	return r, nil
}

func (s *brokenStore) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.recs {
		if n < req.Limit && (r.Expired(req.Now) || s.flaw == sweepsLive) {
			delete(s.recs, k)
			n++
		}
	}
	return n, nil
}

// TestBrokenStoresRejected proves the check has teeth: a store with any of
// the flaws fails it. A flaw shows only when the calls happen to meet it (a
// race, a zombie meeting a retaken key), so each gets a few brief histories
// before the test gives up.
func TestBrokenStoresRejected(t *testing.T) {
	const attempts = 8
	for _, tc := range []struct {
		name string
		flaw flaw
	}{
		{"RacyClaim", racyClaim},
		{"UnfencedFinish", unfencedFinish},
		{"LeaseIgnored", leaseIgnored},
		{"TokenKeptOnRetake", tokenKept},
		{"ReleaseForgetsContent", forgetsContent},
		{"LosesLiveRecord", losesLiveRecord},
		{"SweepsLiveRecords", sweepsLive},
		{"SupersedesOwner", supersedesOwner},
		{"SupersedeKeepsResult", supersedeKeepsResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range attempts {
				s := &brokenStore{flaw: tc.flaw, recs: map[idem.Key]idem.Record{}}
				h, err := lincheck.Record(context.Background(), s, lincheck.Options{Ops: lincheck.DefaultOps, ReportDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				var v *lincheck.Violation
				switch err := h.Check(); {
				case errors.As(err, &v):
					t.Logf("rejected in history %d of %d:\n%s", i+1, attempts, v.Report)
					return
				case err != nil:
					t.Fatal(err)
				}
			}
			t.Fatalf("%d histories of a store with the flaw all passed the check", attempts)
		})
	}
}

// flakyStore fails a share of the calls with a store error, half of them
// after the call took effect and half before: outcomes the check must take
// as unknown, never as a violation.
type flakyStore struct {
	idem.Store
	mu  sync.Mutex
	rng *mrand.Rand
}

var errFlaky = errors.New("flaky: connection reset")

// fail runs call, and reports a store error instead of its answer for one
// call in ten, one in twenty without running it.
func (s *flakyStore) fail(call func() error) error {
	s.mu.Lock()
	n := s.rng.IntN(20)
	s.mu.Unlock()
	switch n {
	case 0:
		return errFlaky
	case 1:
		_ = call()
		return errFlaky
	}
	return call()
}

func (s *flakyStore) Claim(ctx context.Context, req idem.ClaimRequest) (c idem.Claim, err error) {
	err = s.fail(func() (err error) { c, err = s.Store.Claim(ctx, req); return err })
	return c, err
}

func (s *flakyStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	return s.fail(func() error { return s.Store.Complete(ctx, req) })
}

func (s *flakyStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	return s.fail(func() error { return s.Store.Release(ctx, req) })
}

func (s *flakyStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	return s.fail(func() error { return s.Store.Renew(ctx, req) })
}

func (s *flakyStore) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	return s.fail(func() error { return idem.Supersede(ctx, s.Store, req) })
}

func TestUnknownOutcomesAccepted(t *testing.T) {
	s := &flakyStore{Store: memory.New(), rng: mrand.New(mrand.NewPCG(1, 2))}
	h, err := lincheck.Record(context.Background(), s, lincheck.Options{Ops: lincheck.DefaultOps, ReportDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(h.Summary())
	if h.Unknown() == 0 {
		t.Fatal("no call had an unknown outcome")
	}
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
}
