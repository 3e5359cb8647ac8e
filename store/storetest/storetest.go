// Package storetest is the conformance suite every idem.Store runs: the
// executable definition of the Store contract. Third-party stores run it too:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idem.Store { return newIsolatedStore(t) })
//	}
//
// Each subtest asks for a fresh, empty store (its own schema, table or key
// prefix), so subtests never see each other's records. Time is passed in
// requests (the Store contract), so lease expiry is tested without sleeping.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// NewStore returns a fresh, empty store for one subtest and registers its
// cleanup with t.Cleanup.
type NewStore func(t *testing.T) idem.Store

// T0 is the suite's base time: whole milliseconds, so stores with millisecond
// precision keep it exactly.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	lease     = 10 * time.Second
	retention = 24 * time.Hour
)

// Run runs the whole conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s idem.Store)
	}{
		{"FreshClaim", testFreshClaim},
		{"GetNotFound", testGetNotFound},
		{"DuplicateAfterComplete", testDuplicateAfterComplete},
		{"SecondClaimerSeesInProgress", testInProgress},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"ConcurrentRetakeOneWinner", testConcurrentRetake},
		{"LeaseExpiryRetake", testLeaseExpiryRetake},
		{"StaleNotTakenOver", testStaleNotTakenOver},
		{"StaleTokenRejected", testStaleToken},
		{"ReleaseThenReclaim", testRelease},
		{"RenewExtendsLease", testRenew},
		{"ExpiredCompletedReclaimable", testExpiredReclaim},
		{"SweepDeletesOnlyExpired", testSweep},
		{"ScopesIsolated", testScopes},
		{"LongIDs", testLongIDs},
		{"OddIDs", testOddIDs},
		{"LargeResult", testLargeResult},
		{"EmptyResult", testEmptyResult},
		{"CancelledContext", testCancelled},
		{"BatchClaims", testBatch},
		{"ContendedSweepNoErrors", testContendedSweep},
		{"GuardRunsHandlerOnce", testGuardOnce},
		{"GuardOversizedResult", testGuardOversized},
		{"GuardConflict", testGuardConflict},
		{"InspectorPagesEveryID", testPaging},
	}
	tests = append(tests, edgeTests...)
	tests = append(tests, classTests...)
	tests = append(tests, lifetimeStaleTests...)
	tests = append(tests, epochTests...)
	tests = append(tests, retainTests...)
	tests = append(tests, supersedeTests...)
	tests = append(tests, activityTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func claimReq(k idem.Key, fp string, now time.Time) idem.ClaimRequest {
	return idem.ClaimRequest{
		Key: k, Fingerprint: fp, Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(retention), TakeOverStale: true,
	}
}

func mustClaim(t *testing.T, s idem.Store, req idem.ClaimRequest, want idem.ClaimOutcome) idem.Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("Claim(%s): %v", req.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim(%s) = %v, want %v (record %+v)", req.Key, c.Outcome, want, c.Record)
	}
	return c
}

func mustComplete(t *testing.T, s idem.Store, k idem.Key, token int64, result []byte, now time.Time) {
	t.Helper()
	err := s.Complete(context.Background(), idem.CompleteRequest{Key: k, Token: token, Result: result, Now: now, ExpiresAt: now.Add(retention)})
	if err != nil {
		t.Fatalf("Complete(%s, token %d): %v", k, token, err)
	}
}

func mustGet(t *testing.T, s idem.Store, k idem.Key) idem.Record {
	t.Helper()
	r, err := s.Get(context.Background(), k)
	if err != nil {
		t.Fatalf("Get(%s): %v", k, err)
	}
	return r
}

func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

func key(id string) idem.Key { return idem.Key{Scope: "orders", ID: id} }

func testFreshClaim(t *testing.T, s idem.Store) {
	k := key("order-1")
	c := mustClaim(t, s, claimReq(k, "fp1", T0), idem.ClaimAcquired)
	r := c.Record
	if r.Token < 1 || r.Attempts != 1 || r.State != idem.StateInProgress {
		t.Fatalf("fresh claim record = %+v", r)
	}
	if c.Retaken {
		t.Fatal("fresh claim reported Retaken")
	}
	got := mustGet(t, s, k)
	if got.Scope != "orders" || got.ID != "order-1" || got.DisplayID != "order-1" || got.Fingerprint != "fp1" ||
		got.State != idem.StateInProgress || got.Token != r.Token || got.Attempts != 1 {
		t.Fatalf("Get after claim = %+v", got)
	}
	if !sameTime(got.LeaseUntil, T0.Add(lease)) || !sameTime(got.ExpiresAt, T0.Add(retention)) || !sameTime(got.CreatedAt, T0) {
		t.Fatalf("times: lease %v expires %v created %v", got.LeaseUntil, got.ExpiresAt, got.CreatedAt)
	}
}

func testGetNotFound(t *testing.T, s idem.Store) {
	_, err := s.Get(context.Background(), key("nope"))
	if !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func testDuplicateAfterComplete(t *testing.T, s idem.Store) {
	k := key("order-2")
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, k, c.Record.Token, []byte(`{"charged":42}`), T0.Add(time.Second))
	d := mustClaim(t, s, claimReq(k, "fp", T0.Add(2*time.Second)), idem.ClaimDuplicate)
	if string(d.Record.Result) != `{"charged":42}` || d.Record.State != idem.StateCompleted || d.Record.Fingerprint != "fp" {
		t.Fatalf("duplicate record = %+v", d.Record)
	}
	if !sameTime(d.Record.ExpiresAt, T0.Add(time.Second+retention)) {
		t.Fatalf("completed ExpiresAt = %v, want %v", d.Record.ExpiresAt, T0.Add(time.Second+retention))
	}
	// A duplicate changes nothing.
	if got := mustGet(t, s, k); got.Token != c.Record.Token || got.Attempts != 1 {
		t.Fatalf("duplicate changed the record: %+v", got)
	}
}

func testInProgress(t *testing.T, s idem.Store) {
	k := key("order-3")
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	ip := mustClaim(t, s, claimReq(k, "fp", T0.Add(lease-time.Millisecond)), idem.ClaimInProgress)
	if ip.Record.Token != c.Record.Token || ip.Record.State != idem.StateInProgress {
		t.Fatalf("in-progress record = %+v", ip.Record)
	}
	if got := mustGet(t, s, k); got.Token != c.Record.Token || got.Attempts != 1 {
		t.Fatalf("in-progress claim changed the record: %+v", got)
	}
}

// testConcurrentClaims: 64 goroutines claim each of many keys at once;
// exactly one wins each key, the others see it in progress.
func testConcurrentClaims(t *testing.T, s idem.Store) {
	const goroutines, keys = 64, 16
	for i := range keys {
		k := key(fmt.Sprintf("race-%d", i))
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			outcomes = map[idem.ClaimOutcome]int{}
			tokens   = map[int64]bool{}
			errs     []error
		)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := s.Claim(context.Background(), claimReq(k, "fp", T0))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				outcomes[c.Outcome]++
				if c.Outcome == idem.ClaimAcquired {
					tokens[c.Record.Token] = true
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("key %s: %d claim errors, first: %v", k, len(errs), errs[0])
		}
		if outcomes[idem.ClaimAcquired] != 1 || outcomes[idem.ClaimInProgress] != goroutines-1 {
			t.Fatalf("key %s: outcomes %v, want exactly 1 acquired and %d in progress", k, outcomes, goroutines-1)
		}
	}
}

// testConcurrentRetake: many goroutines find the same stale record at once;
// exactly one takes it over.
func testConcurrentRetake(t *testing.T, s idem.Store) {
	const goroutines = 64
	k := key("stale-race")
	first := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	later := T0.Add(lease + time.Second)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		won   []idem.Claim
		other int
		errs  []error
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := s.Claim(context.Background(), claimReq(k, "fp", later))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case c.Outcome == idem.ClaimAcquired:
				won = append(won, c)
			case c.Outcome == idem.ClaimInProgress:
				other++
			default:
				errs = append(errs, fmt.Errorf("unexpected outcome %v", c.Outcome))
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %v", len(errs), errs[0])
	}
	if len(won) != 1 || other != goroutines-1 {
		t.Fatalf("retake: %d winners, %d in progress; want 1 and %d", len(won), other, goroutines-1)
	}
	if !won[0].Retaken || won[0].Record.Token <= first.Record.Token || won[0].Record.Attempts != 2 {
		t.Fatalf("retake claim = %+v (first token %d)", won[0], first.Record.Token)
	}
}

func testLeaseExpiryRetake(t *testing.T, s idem.Store) {
	k := key("order-4")
	first := mustClaim(t, s, claimReq(k, "original", T0), idem.ClaimAcquired)
	later := T0.Add(lease) // the lease ends at LeaseUntil exactly
	req := claimReq(k, "other", later)
	c := mustClaim(t, s, req, idem.ClaimAcquired)
	if !c.Retaken {
		t.Fatal("retake not reported")
	}
	if c.Record.Token <= first.Record.Token || c.Record.Attempts != 2 || c.Record.State != idem.StateInProgress {
		t.Fatalf("retaken record = %+v", c.Record)
	}
	if c.Record.Fingerprint != "original" {
		t.Fatalf("retake must keep the stored fingerprint, got %q", c.Record.Fingerprint)
	}
	if !sameTime(c.Record.LeaseUntil, later.Add(lease)) {
		t.Fatalf("retaken LeaseUntil = %v", c.Record.LeaseUntil)
	}
	got := mustGet(t, s, k)
	if got.Token != c.Record.Token || !sameTime(got.CreatedAt, T0) {
		t.Fatalf("Get after retake = %+v", got)
	}
}

func testStaleNotTakenOver(t *testing.T, s idem.Store) {
	k := key("order-parked")
	first := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	req := claimReq(k, "fp", T0.Add(lease+time.Second))
	req.TakeOverStale = false
	c := mustClaim(t, s, req, idem.ClaimStale)
	if c.Record.Token != first.Record.Token {
		t.Fatalf("stale claim changed token: %+v", c.Record)
	}
	// The first owner's token is still current: it may complete late.
	mustComplete(t, s, k, first.Record.Token, []byte("late"), T0.Add(lease+2*time.Second))
	mustClaim(t, s, req, idem.ClaimDuplicate)
}

func testStaleToken(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("order-5")
	old := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	later := T0.Add(lease + time.Second)
	cur := mustClaim(t, s, claimReq(k, "fp", later), idem.ClaimAcquired)
	oldTok := old.Record.Token
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: oldTok, Result: []byte("zombie"), Now: later, ExpiresAt: later.Add(retention)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete with stale token = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: oldTok, Now: later}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Release with stale token = %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: oldTok, Now: later, LeaseUntil: later.Add(time.Hour)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew with stale token = %v, want ErrLeaseLost", err)
	}
	got := mustGet(t, s, k)
	if got.State != idem.StateInProgress || got.Token != cur.Record.Token || len(got.Result) != 0 || !sameTime(got.LeaseUntil, later.Add(lease)) {
		t.Fatalf("zombie changed the record: %+v", got)
	}
	mustComplete(t, s, k, cur.Record.Token, []byte("ok"), later)
	// Completed: no token may complete, release or renew it again.
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cur.Record.Token, Result: []byte("again"), Now: later, ExpiresAt: later.Add(retention)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: cur.Record.Token, Now: later}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Release of completed = %v, want ErrLeaseLost", err)
	}
	if got := mustGet(t, s, k); string(got.Result) != "ok" || got.State != idem.StateCompleted {
		t.Fatalf("after completion: %+v", got)
	}
	// Unknown keys have no owner.
	if err := s.Complete(ctx, idem.CompleteRequest{Key: key("ghost"), Token: 1, Now: later, ExpiresAt: later.Add(retention)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete of unknown key = %v, want ErrLeaseLost", err)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: key("ghost"), Token: 1, Now: later, LeaseUntil: later.Add(lease)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Renew of unknown key = %v, want ErrLeaseLost", err)
	}
}

func testRelease(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("order-6")
	first := mustClaim(t, s, claimReq(k, "fp1", T0), idem.ClaimAcquired)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: first.Record.Token, Now: T0.Add(time.Second)}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := mustGet(t, s, k); got.State != idem.StateReleased || got.Token != first.Record.Token {
		t.Fatalf("after release: %+v", got)
	}
	// Released keys are claimable at once (the lease does not hold them),
	// and keep the content they were first claimed with.
	second := mustClaim(t, s, claimReq(k, "fp2", T0.Add(2*time.Second)), idem.ClaimAcquired)
	if second.Record.Token <= first.Record.Token || second.Record.Attempts != 2 || second.Retaken || second.Record.Fingerprint != "fp1" {
		t.Fatalf("reclaim after release = %+v", second)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Now: T0.Add(3 * time.Second), ExpiresAt: T0.Add(retention)}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete by the releaser = %v, want ErrLeaseLost", err)
	}
	mustComplete(t, s, k, second.Record.Token, nil, T0.Add(3*time.Second))
}

func testRenew(t *testing.T, s idem.Store) {
	k := key("order-7")
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	err := s.Renew(context.Background(), idem.RenewRequest{Key: k, Token: c.Record.Token, Now: T0.Add(5 * time.Second), LeaseUntil: T0.Add(20 * time.Second)})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	mustClaim(t, s, claimReq(k, "fp", T0.Add(15*time.Second)), idem.ClaimInProgress)
	r := mustClaim(t, s, claimReq(k, "fp", T0.Add(21*time.Second)), idem.ClaimAcquired)
	if !r.Retaken {
		t.Fatal("claim after the renewed lease ended was not a retake")
	}
}

func testExpiredReclaim(t *testing.T, s idem.Store) {
	k := key("order-8")
	c := mustClaim(t, s, claimReq(k, "fp1", T0), idem.ClaimAcquired)
	mustComplete(t, s, k, c.Record.Token, []byte("old"), T0)
	after := T0.Add(retention) // ExpiresAt <= now: expired
	n := mustClaim(t, s, claimReq(k, "fp2", after), idem.ClaimAcquired)
	if n.Record.Token <= c.Record.Token || n.Record.Attempts != 1 || len(n.Record.Result) != 0 ||
		n.Record.Fingerprint != "fp2" || n.Retaken || n.Record.State != idem.StateInProgress {
		t.Fatalf("reclaim of expired record = %+v", n)
	}
}

func testSweep(t *testing.T, s idem.Store) {
	ctx := context.Background()
	// 25 records past their retention (completed, in progress and
	// released), 10 live ones. Of the 25, the 8 in progress (i%3 == 2) are
	// stale, never expired: only the 17 settled ones are swept.
	for i := range 25 {
		k := key(fmt.Sprintf("old-%02d", i))
		req := claimReq(k, "fp", T0)
		req.ExpiresAt = T0.Add(time.Hour)
		c := mustClaim(t, s, req, idem.ClaimAcquired)
		switch i % 3 {
		case 0:
			if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: T0, ExpiresAt: T0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: T0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 10 {
		k := key(fmt.Sprintf("live-%02d", i))
		c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
		if i%2 == 0 {
			mustComplete(t, s, k, c.Record.Token, nil, T0)
		}
	}
	now := T0.Add(2 * time.Hour)
	total, batches := 0, 0
	for {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10})
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n > 10 {
			t.Fatalf("Sweep deleted %d rows with Limit 10", n)
		}
		total += n
		batches++
		if n == 0 || batches > 10 {
			break
		}
	}
	if total != 17 {
		t.Fatalf("swept %d records, want the 17 settled ones", total)
	}
	for i := range 25 {
		_, err := s.Get(ctx, key(fmt.Sprintf("old-%02d", i)))
		if stale := i%3 == 2; stale && err != nil {
			t.Fatalf("old-%02d (in progress, stale) after sweep: %v; a stale record is never swept", i, err)
		} else if !stale && !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("old-%02d after sweep: %v", i, err)
		}
	}
	for i := range 10 {
		mustGet(t, s, key(fmt.Sprintf("live-%02d", i)))
	}
}

func testScopes(t *testing.T, s idem.Store) {
	a := idem.Key{Scope: "billing", ID: "evt-1"}
	b := idem.Key{Scope: "shipping", ID: "evt-1"}
	ca := mustClaim(t, s, claimReq(a, "fp", T0), idem.ClaimAcquired)
	mustClaim(t, s, claimReq(b, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, a, ca.Record.Token, []byte("billed"), T0)
	mustClaim(t, s, claimReq(a, "fp", T0), idem.ClaimDuplicate)
	if got := mustGet(t, s, b); got.State != idem.StateInProgress || len(got.Result) != 0 {
		t.Fatalf("scope shipping affected by billing: %+v", got)
	}
}

func testLongIDs(t *testing.T, s idem.Store) {
	base := strings.Repeat("x", 5000)
	k1, k2 := key(base+"1"), key(base+"2")
	c1 := mustClaim(t, s, claimReq(k1, "fp", T0), idem.ClaimAcquired)
	mustClaim(t, s, claimReq(k2, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, k1, c1.Record.Token, []byte("one"), T0)
	mustClaim(t, s, claimReq(k1, "fp", T0), idem.ClaimDuplicate)
	r2 := mustGet(t, s, k2)
	if r2.State != idem.StateInProgress || r2.ID != k2.StoredID() || len(r2.ID) > idem.MaxIDLen {
		t.Fatalf("long id record = %+v", r2)
	}
	if r2.DisplayID != k2.DisplayID() {
		t.Fatalf("DisplayID = %.40q…, want the original's first %d bytes", r2.DisplayID, idem.MaxDisplayLen)
	}
	// An id of exactly MaxIDLen bytes is stored as is.
	edge := key(strings.Repeat("e", idem.MaxIDLen))
	mustClaim(t, s, claimReq(edge, "fp", T0), idem.ClaimAcquired)
	if got := mustGet(t, s, edge); got.ID != edge.ID {
		t.Fatalf("id of MaxIDLen bytes stored as %q", got.ID)
	}
}

func testOddIDs(t *testing.T, s idem.Store) {
	ids := []string{"with space", "quote'\"`", "percent%_", "star*?[", "{hash}tag", "ünïcødé-日本", "a:b:c", `back\slash`, "'; drop table x; --", "-", "sha256:deadbeef"}
	for _, id := range ids {
		k := key(id)
		c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
		if got := mustGet(t, s, k); got.ID != k.StoredID() || got.Key().ID != id {
			t.Fatalf("id %q stored as %q / %q", id, got.ID, got.DisplayID)
		}
		mustComplete(t, s, k, c.Record.Token, []byte(id), T0)
	}
	for _, id := range ids {
		d := mustClaim(t, s, claimReq(key(id), "fp", T0), idem.ClaimDuplicate)
		if string(d.Record.Result) != id {
			t.Fatalf("result of %q = %q", id, d.Record.Result)
		}
	}
	// Patterns must not match other keys (LIKE, glob).
	mustClaim(t, s, claimReq(key("star*"), "fp", T0), idem.ClaimAcquired)
	mustClaim(t, s, claimReq(key("percent%"), "fp", T0), idem.ClaimAcquired)
}

func testLargeResult(t *testing.T, s idem.Store) {
	k := key("big")
	res := bytes.Repeat([]byte{0, 1, 2, 0xff, 'a'}, idem.DefaultMaxResultSize/5)
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, k, c.Record.Token, res, T0)
	d := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimDuplicate)
	if !bytes.Equal(d.Record.Result, res) {
		t.Fatalf("binary result of %d bytes came back as %d bytes (or altered)", len(res), len(d.Record.Result))
	}
}

func testEmptyResult(t *testing.T, s idem.Store) {
	k := key("empty")
	c := mustClaim(t, s, claimReq(k, "", T0), idem.ClaimAcquired)
	mustComplete(t, s, k, c.Record.Token, nil, T0)
	d := mustClaim(t, s, claimReq(k, "", T0), idem.ClaimDuplicate)
	if len(d.Record.Result) != 0 || d.Record.Fingerprint != "" {
		t.Fatalf("empty result/fingerprint came back as %+v", d.Record)
	}
}

func testCancelled(t *testing.T, s idem.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := key("cancelled")
	if _, err := s.Claim(ctx, claimReq(k, "fp", T0)); err == nil {
		t.Fatal("Claim with a cancelled context succeeded")
	}
	if _, err := s.Get(ctx, k); err == nil || errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get with a cancelled context = %v, want a context error", err)
	}
	// Nothing was claimed: a live context acquires the key.
	mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
}

func testBatch(t *testing.T, s idem.Store) {
	ctx := context.Background()
	done := key("batch-done")
	busy := key("batch-busy")
	c := mustClaim(t, s, claimReq(done, "fp", T0), idem.ClaimAcquired)
	mustComplete(t, s, done, c.Record.Token, []byte("r"), T0)
	mustClaim(t, s, claimReq(busy, "fp", T0), idem.ClaimAcquired)
	reqs := []idem.ClaimRequest{claimReq(done, "fp", T0), claimReq(busy, "fp", T0)}
	for i := range 200 {
		reqs = append(reqs, claimReq(key(fmt.Sprintf("batch-%03d", i)), "fp", T0))
	}
	sent := slices.Clone(reqs)
	claims, err := idem.ClaimBatch(ctx, s, reqs)
	if err != nil {
		t.Fatalf("ClaimBatch: %v", err)
	}
	if len(claims) != len(reqs) {
		t.Fatalf("ClaimBatch returned %d claims for %d requests", len(claims), len(reqs))
	}
	// The requests are the caller's again once ClaimBatch returns (a
	// guard uses their room for its next batch): the store wrote nothing
	// to them, and the claims hold nothing of them (under -race, a store
	// still reading them would race with the clear).
	if !reflect.DeepEqual(reqs, sent) {
		t.Fatal("ClaimBatch changed the requests it was given")
	}
	clear(reqs)
	reqs = sent
	if claims[0].Outcome != idem.ClaimDuplicate || string(claims[0].Record.Result) != "r" {
		t.Fatalf("batch[0] = %+v, want duplicate with result", claims[0])
	}
	if claims[1].Outcome != idem.ClaimInProgress {
		t.Fatalf("batch[1] = %v, want in progress", claims[1].Outcome)
	}
	for i, c := range claims[2:] {
		want := fmt.Sprintf("batch-%03d", i)
		if c.Outcome != idem.ClaimAcquired || c.Record.ID != want || c.Record.Token < 1 {
			t.Fatalf("batch[%d] = %v %q, want acquired %q", i+2, c.Outcome, c.Record.ID, want)
		}
	}
	// A second identical batch finds every key taken.
	again, err := idem.ClaimBatch(ctx, s, reqs[2:])
	if err != nil {
		t.Fatalf("ClaimBatch again: %v", err)
	}
	for i, c := range again {
		if c.Outcome != idem.ClaimInProgress {
			t.Fatalf("second batch[%d] = %v, want in progress", i, c.Outcome)
		}
	}
}

func newGuard(t *testing.T, s idem.Store, opts idem.Options) *idem.Guard {
	t.Helper()
	if opts.Scope == "" {
		opts.Scope = "guard"
	}
	g, err := idem.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// testGuardOnce: 32 goroutines deliver the same message at once, repeatedly;
// the handler runs exactly once and every later delivery is a duplicate.
func testGuardOnce(t *testing.T, s idem.Store) {
	g := newGuard(t, s, idem.Options{})
	ctx := context.Background()
	for round := range 4 {
		msg := idem.Message{ID: fmt.Sprintf("m-%d", round), Payload: []byte("pay 10")}
		var (
			runs    atomic.Int32
			start   = make(chan struct{})
			release = make(chan struct{})
			results = make(chan idem.Outcome, 32)
		)
		for range 32 {
			go func() {
				<-start
				res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
					runs.Add(1)
					<-release // hold the claim until every other delivery has tried
					return []byte("done"), nil
				})
				if err != nil && !errors.Is(err, idem.ErrInProgress) {
					t.Errorf("Do: %v", err)
				}
				results <- res.Outcome
			}()
		}
		close(start)
		// The 31 losers return while the winner is held inside the handler.
		for i := range 31 {
			if o := <-results; o != idem.OutcomeInProgress {
				close(release)
				t.Fatalf("round %d: delivery %d = %v while the first was in progress", round, i, o)
			}
		}
		close(release)
		if o := <-results; o != idem.OutcomeProcessed || runs.Load() != 1 {
			t.Fatalf("round %d: winner %v, handler ran %d times", round, o, runs.Load())
		}
		res, err := g.Do(ctx, msg, func(context.Context) ([]byte, error) {
			t.Fatal("handler ran for a duplicate")
			return nil, nil
		})
		if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "done" {
			t.Fatalf("redelivery = %v %q %v", res.Outcome, res.Value, err)
		}
	}
}

func testGuardOversized(t *testing.T, s idem.Store) {
	g := newGuard(t, s, idem.Options{MaxResultSize: 16})
	msg := idem.Message{ID: "huge", Payload: []byte("x")}
	res, err := g.Do(context.Background(), msg, func(context.Context) ([]byte, error) {
		return bytes.Repeat([]byte("y"), 17), nil
	})
	if !errors.Is(err, idem.ErrResultTooLarge) || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("oversized result: %v %v", res.Outcome, err)
	}
	if a := idem.Decide(res, err); a != idem.ActionAck {
		t.Fatalf("oversized result action = %v, want ack (the effect happened)", a)
	}
	res, err = g.Do(context.Background(), msg, func(context.Context) ([]byte, error) {
		t.Fatal("handler re-ran after an oversized result")
		return nil, nil
	})
	if err != nil || res.Outcome != idem.OutcomeDuplicate || len(res.Value) != 0 {
		t.Fatalf("after oversized: %v %q %v", res.Outcome, res.Value, err)
	}
}

func testGuardConflict(t *testing.T, s idem.Store) {
	g := newGuard(t, s, idem.Options{})
	ctx := context.Background()
	h := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	if _, err := g.Do(ctx, idem.Message{ID: "c1", Payload: []byte("amount=10")}, h); err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(ctx, idem.Message{ID: "c1", Payload: []byte("amount=99")}, h)
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter {
		t.Fatalf("conflicting redelivery: %v %v", res.Outcome, err)
	}
	if string(ce.Record.Result) != "ok" || ce.Record.State != idem.StateCompleted {
		t.Fatalf("conflict carries record %+v", ce.Record)
	}
}
