package redisidem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/storetest"
)

// seed claims n keys named prefix-i at T0 with retention ret and returns
// their keys.
func seed(t *testing.T, s idem.Store, name string, n int, ret time.Duration) []idem.Key {
	t.Helper()
	reqs := make([]idem.ClaimRequest, n)
	keys := make([]idem.Key, n)
	for i := range reqs {
		keys[i] = idem.Key{Scope: "sweep", ID: fmt.Sprintf("%s-%d", name, i)}
		reqs[i] = idem.ClaimRequest{Key: keys[i], Now: storetest.T0, LeaseUntil: storetest.T0.Add(time.Minute), ExpiresAt: storetest.T0.Add(ret)}
	}
	cs, err := idem.ClaimBatch(context.Background(), s, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if c.Outcome != idem.ClaimAcquired {
			t.Fatalf("seed %s: %v", keys[i], c.Outcome)
		}
	}
	return keys
}

// seedDone is seed with each record completed (retention ret from T0):
// only settled records expire.
func seedDone(t *testing.T, s idem.Store, name string, n int, ret time.Duration) []idem.Key {
	t.Helper()
	keys := seed(t, s, name, n, ret)
	for _, k := range keys {
		r, err := s.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(context.Background(), idem.CompleteRequest{Key: k, Token: r.Token, Now: storetest.T0, ExpiresAt: storetest.T0.Add(ret)}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestSweepBoundedBatches: with far more expired records than Limit, every
// call deletes at most Limit, repeated calls delete them all, and live
// records stay.
func TestSweepBoundedBatches(t *testing.T) { testSweepBoundedBatches(t, standalone) }

func testSweepBoundedBatches(t *testing.T, on backend) {
	s := newStore(t, on.client(t))
	ctx := context.Background()
	old := seedDone(t, s, "old", 2500, time.Hour)
	live := seedDone(t, s, "live", 300, 48*time.Hour)
	now := storetest.T0.Add(2 * time.Hour)
	total := 0
	for calls := 0; total < len(old); calls++ {
		if calls > 100 {
			t.Fatalf("swept %d of %d after %d calls", total, len(old), calls)
		}
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if n > 100 {
			t.Fatalf("Sweep deleted %d with Limit 100", n)
		}
		total += n
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); n != 0 || err != nil {
		t.Fatalf("sweep after all deleted = %d, %v", n, err)
	}
	if total != len(old) {
		t.Fatalf("swept %d, want %d", total, len(old))
	}
	for _, k := range old[:50] {
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s after sweep: %v", k, err)
		}
	}
	for _, k := range live {
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatalf("live %s: %v", k, err)
		}
	}
}

// TestSweepOneInstanceAtATime: while another instance holds the sweep lock,
// Sweep returns 0 and deletes nothing.
func TestSweepOneInstanceAtATime(t *testing.T) { testSweepOneInstanceAtATime(t, standalone) }

func testSweepOneInstanceAtATime(t *testing.T, on backend) {
	c := on.client(t)
	s := newStore(t, c)
	ctx := context.Background()
	old := seedDone(t, s, "old", 10, time.Hour)
	now := storetest.T0.Add(2 * time.Hour)
	lock := s.Prefix() + ":sweep-lock"
	if err := c.Set(ctx, lock, "another-instance", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); n != 0 || err != nil {
		t.Fatalf("Sweep while locked = %d, %v; want 0", n, err)
	}
	if _, err := s.Get(ctx, old[0]); err != nil {
		t.Fatalf("record deleted while another instance held the lock: %v", err)
	}
	if err := c.Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); n != 10 || err != nil {
		t.Fatalf("Sweep after unlock = %d, %v; want 10", n, err)
	}
	// The sweeper released its lock.
	if n, _ := c.Exists(ctx, lock).Result(); n != 0 {
		t.Fatal("sweep lock left behind")
	}
}

// TestSweepSparesReclaimed: records expired at the sweep's Now are claimed
// again while two instances sweep; the sweep re-checks each record in its
// delete script, so no fresh claim is deleted.
func TestSweepSparesReclaimed(t *testing.T) { testSweepSparesReclaimed(t, standalone) }

func testSweepSparesReclaimed(t *testing.T, on backend) {
	a, b := twoStores(t, on)
	ctx := context.Background()
	old := seedDone(t, a, "old", 1000, time.Hour)
	now := storetest.T0.Add(2 * time.Hour)
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		acquired = make([]bool, len(old))
		errs     = make(chan error, 3)
	)
	for _, s := range []*redisidem.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range 200 {
				if _, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 50}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for i, k := range old {
			c, err := b.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil {
				errs <- err
				return
			}
			acquired[i] = c.Outcome == idem.ClaimAcquired
		}
	}()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, k := range old {
		if !acquired[i] {
			t.Fatalf("claim of expired %s did not acquire", k)
		}
		r, err := a.Get(ctx, k)
		if err != nil || r.State != idem.StateInProgress {
			t.Fatalf("reclaimed %s after sweeps: %+v, %v", k, r, err)
		}
	}
}

// TestBatchRewrites: a batch whose keys need rewriting (released, stale,
// expired) goes through the claim script and gets the same answers as
// single claims: acquired with the next token, the stored fingerprint kept
// through a release; a key with no record gets the request's own fresh
// token.
func TestBatchRewrites(t *testing.T) { testBatchRewrites(t, standalone) }

func testBatchRewrites(t *testing.T, on backend) {
	s := newStore(t, on.client(t))
	ctx := context.Background()
	t0 := storetest.T0
	keys := seed(t, s, "rw", 3, time.Hour) // lease t0+1m, expires t0+1h, no fingerprint
	sticky := idem.Key{Scope: "sweep", ID: "sticky"}
	if _, err := s.Claim(ctx, idem.ClaimRequest{Key: sticky, Fingerprint: "orig", Now: t0, LeaseUntil: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, sticky)
	tokens := make([]int64, len(keys))
	for i, k := range keys {
		r, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = r.Token
	}
	for _, i := range []int{0, 3} {
		if err := s.Release(ctx, idem.ReleaseRequest{Key: keys[i], Token: tokens[i], Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	// keys[2] completed, expired by the batch's time (still in Redis).
	if err := s.Complete(ctx, idem.CompleteRequest{Key: keys[2], Token: tokens[2], Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(30 * time.Minute) // keys[1] stale (lease ended)
	fresh := idem.Key{Scope: "sweep", ID: "fresh"}
	reqs := []idem.ClaimRequest{
		{Key: keys[0], Fingerprint: "new", Now: at, LeaseUntil: at.Add(time.Minute), ExpiresAt: at.Add(time.Hour)},
		{Key: keys[1], Now: at, LeaseUntil: at.Add(time.Minute), ExpiresAt: at.Add(time.Hour), TakeOverStale: true},
		{Key: keys[2], Now: t0.Add(2 * time.Hour), LeaseUntil: t0.Add(2*time.Hour + time.Minute), ExpiresAt: t0.Add(3 * time.Hour)},
		{Key: keys[3], Fingerprint: "other", Now: at, LeaseUntil: at.Add(time.Minute), ExpiresAt: at.Add(time.Hour)},
		{Key: fresh, Now: at, LeaseUntil: at.Add(time.Minute), ExpiresAt: at.Add(time.Hour), NewToken: 1 << 40},
	}
	cs, err := s.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		token    int64
		attempts int
		retaken  bool
		fp       string
	}{
		{tokens[0] + 1, 2, false, "new"}, // released without a fingerprint: takes the request's
		{tokens[1] + 1, 2, true, ""},
		{tokens[2] + 1, 1, false, ""}, // expired, still in Redis: a new lifetime counting on
		{tokens[3] + 1, 2, false, "orig"},
		{1 << 40, 1, false, ""},
	}
	for i, c := range cs {
		w := want[i]
		if c.Outcome != idem.ClaimAcquired || c.Record.Token != w.token || c.Record.Attempts != w.attempts ||
			c.Retaken != w.retaken || c.Record.Fingerprint != w.fp {
			t.Errorf("batch[%d] = %v token %d attempts %d retaken %v fingerprint %q; want acquired %+v",
				i, c.Outcome, c.Record.Token, c.Record.Attempts, c.Retaken, c.Record.Fingerprint, w)
		}
	}
	if !cs[0].Record.LeaseUntil.Equal(at.Add(time.Minute)) {
		t.Errorf("reclaimed record = %+v", cs[0].Record)
	}
	// Each is held under its new token: completing works, old tokens fail.
	for i, c := range cs {
		if err := s.Complete(ctx, idem.CompleteRequest{Key: reqs[i].Key, Token: c.Record.Token - 1, Now: at, ExpiresAt: at.Add(time.Hour)}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("complete %d with the old token = %v", i, err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: reqs[i].Key, Token: c.Record.Token, Now: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
			t.Errorf("complete %d: %v", i, err)
		}
	}
}
