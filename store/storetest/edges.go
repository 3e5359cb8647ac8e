package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// The edge cases: the record rules of the Store contract at the edges a
// user reaches (long handlers, deletions, odd fingerprints, skewed clocks).

// edgeTests are run by Run after the core cases.
var edgeTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"LifetimeRenewOutlivesRetention", testLifetimeRenew},
	{"LifetimeLeaseLongerThanRetention", testLifetimeShortRetention},
	{"SweepSkipsLiveLease", testSweepLiveLease},
	{"SweepLimitNotPositive", testSweepLimit},
	{"InvalidDataZeroTimes", testZeroTimes},
	{"TokenUniqueAcrossDeletion", testTokenAcrossDeletion},
	{"TokenUniqueAcrossExpiry", testTokenAcrossExpiry},
	{"FingerprintSticksAfterRelease", testFingerprintSticks},
	{"FingerprintAnyBytes", testFingerprintBytes},
	{"HashedIDsDisjoint", testHashedIDsDisjoint},
	{"ClockBehindServer", func(t *testing.T, s idem.Store) { testClockSkew(t, s, -time.Hour) }},
	{"ClockAheadOfServer", func(t *testing.T, s idem.Store) { testClockSkew(t, s, time.Hour) }},
	{"GuardLongHandlerKeepsKey", testGuardLongHandler},
	{"GuardConflictAfterCrash", testGuardConflictAfterCrash},
	{"GuardRawFingerprint", testGuardRawFingerprint},
	{"GuardCompleteReplyLost", testGuardCompleteReplyLost},
}

// testLifetimeRenew: a handler that runs longer than the retention, its
// lease renewed, keeps its key: no claim acquires it and no sweep deletes it
// while the lease is live, and the record's expiry moves with the lease.
func testLifetimeRenew(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("long-job")
	req := claimReq(k, "fp", T0)
	req.ExpiresAt = T0.Add(30 * time.Second) // retention 30s, lease 10s
	c := mustClaim(t, s, req, idem.ClaimAcquired)
	for at := T0.Add(5 * time.Second); at.Before(T0.Add(3 * time.Minute)); at = at.Add(5 * time.Second) {
		if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: at, LeaseUntil: at.Add(lease)}); err != nil {
			t.Fatalf("Renew at +%v: %v", at.Sub(T0), err)
		}
	}
	last := T0.Add(3*time.Minute - 5*time.Second)
	r := mustGet(t, s, k)
	if r.ExpiresAt.Before(r.LeaseUntil) || !sameTime(r.LeaseUntil, last.Add(lease)) {
		t.Fatalf("after renewals past the retention: lease until %v, expires %v; want the expiry carried with the lease to %v",
			r.LeaseUntil, r.ExpiresAt, last.Add(lease))
	}
	now := last.Add(lease / 2)
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); err != nil || n != 0 {
		t.Fatalf("Sweep during a live lease = %d, %v; want 0 (the record is in progress)", n, err)
	}
	ip := mustClaim(t, s, claimReq(k, "fp", now), idem.ClaimInProgress)
	if ip.Record.Token != c.Record.Token {
		t.Fatalf("in-progress record token %d, want %d", ip.Record.Token, c.Record.Token)
	}
	mustComplete(t, s, k, c.Record.Token, []byte("done"), now)
	d := mustClaim(t, s, claimReq(k, "fp", now.Add(time.Second)), idem.ClaimDuplicate)
	if string(d.Record.Result) != "done" {
		t.Fatalf("duplicate result %q", d.Record.Result)
	}
}

// testLifetimeShortRetention: a claim whose retention ends before its lease
// does not expire before the lease end.
func testLifetimeShortRetention(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("short-retention")
	req := claimReq(k, "fp", T0)
	req.ExpiresAt = T0.Add(time.Second) // before the lease end (T0+10s)
	c := mustClaim(t, s, req, idem.ClaimAcquired)
	if r := mustGet(t, s, k); r.ExpiresAt.Before(r.LeaseUntil) {
		t.Fatalf("in-progress record expires %v before its lease ends %v", r.ExpiresAt, r.LeaseUntil)
	}
	mid := T0.Add(5 * time.Second)
	mustClaim(t, s, claimReq(k, "fp", mid), idem.ClaimInProgress)
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: mid, Limit: 100}); err != nil || n != 0 {
		t.Fatalf("Sweep inside the lease = %d, %v; want 0", n, err)
	}
	mustComplete(t, s, k, c.Record.Token, nil, mid)
}

// testSweepLiveLease: among records past their retention, the in-progress
// ones whose lease is live (renewed past the retention) are kept, and the
// completed ones are swept.
func testSweepLiveLease(t *testing.T, s idem.Store) {
	ctx := context.Background()
	now := T0.Add(time.Hour)
	var live []idem.Key
	for i := range 6 {
		k := key(fmt.Sprintf("sweep-%d", i))
		req := claimReq(k, "fp", T0)
		req.ExpiresAt = T0.Add(time.Minute)
		c := mustClaim(t, s, req, idem.ClaimAcquired)
		if i%2 == 0 { // renewed into a lease live at now
			if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: now.Add(-time.Second), LeaseUntil: now.Add(lease)}); err != nil {
				t.Fatal(err)
			}
			live = append(live, k)
		} else if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: T0, ExpiresAt: T0.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for range 10 {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n == 0 {
			break
		}
	}
	if total != 3 {
		t.Fatalf("swept %d records, want the 3 completed ones", total)
	}
	for _, k := range live {
		if r := mustGet(t, s, k); r.State != idem.StateInProgress {
			t.Fatalf("%s: %+v", k, r)
		}
	}
}

// testSweepLimit: Sweep deletes at most Limit records; a Limit of zero or
// less deletes none.
func testSweepLimit(t *testing.T, s idem.Store) {
	ctx := context.Background()
	for i := range 3 {
		k := key(fmt.Sprintf("limit-%d", i))
		c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
		mustComplete(t, s, k, c.Record.Token, nil, T0)
	}
	now := T0.Add(2 * retention)
	for _, limit := range []int{0, -1} {
		if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: limit}); err != nil || n != 0 {
			t.Fatalf("Sweep(Limit %d) = %d, %v; want 0, nil (at most Limit)", limit, n, err)
		}
	}
	for i := range 3 {
		mustGet(t, s, key(fmt.Sprintf("limit-%d", i)))
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 2}); err != nil || n != 2 {
		t.Fatalf("Sweep(Limit 2) = %d, %v; want 2", n, err)
	}
}

// testZeroTimes: a request without its times is rejected as invalid data
// (permanent), and nothing is written.
func testZeroTimes(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("zero-times")
	for name, mut := range map[string]func(*idem.ClaimRequest){
		"ExpiresAt":  func(r *idem.ClaimRequest) { r.ExpiresAt = time.Time{} },
		"LeaseUntil": func(r *idem.ClaimRequest) { r.LeaseUntil = time.Time{} },
		"Now":        func(r *idem.ClaimRequest) { r.Now = time.Time{} },
	} {
		req := claimReq(k, "fp", T0)
		mut(&req)
		_, err := s.Claim(ctx, req)
		if !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
			t.Fatalf("Claim with zero %s: %v; want ErrInvalidData (permanent)", name, err)
		}
		if _, err := idem.ClaimBatch(ctx, s, []idem.ClaimRequest{req}); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("ClaimBatch with zero %s: %v; want ErrInvalidData", name, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("after the rejected claim (zero %s): Get = %v, want ErrNotFound", name, err)
		}
	}
	c := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: T0})
	if !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Complete with zero ExpiresAt: %v; want ErrInvalidData", err)
	}
	if r := mustGet(t, s, k); r.State != idem.StateInProgress {
		t.Fatalf("rejected Complete changed the record: %+v", r)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: T0}); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Renew with zero LeaseUntil: %v; want ErrInvalidData", err)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token}); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("Release with zero Now: %v; want ErrInvalidData", err)
	}
	if r := mustGet(t, s, k); r.State != idem.StateInProgress {
		t.Fatalf("rejected Release changed the record: %+v", r)
	}
}

// testTokenAcrossDeletion: a key swept and claimed again, many times over:
// a zombie of any earlier lifetime can neither complete, renew nor release
// over the current owner.
func testTokenAcrossDeletion(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("reborn")
	var zombies []int64
	seen := map[int64]bool{}
	at := T0
	for life := range 12 {
		req := claimReq(k, "fp", at)
		req.ExpiresAt = at.Add(lease) // expires with its lease
		c := mustClaim(t, s, req, idem.ClaimAcquired)
		tok := c.Record.Token
		if seen[tok] {
			t.Fatalf("lifetime %d reuses token %d of an earlier lifetime of the key", life, tok)
		}
		seen[tok] = true
		for _, z := range zombies {
			now := at.Add(time.Millisecond)
			if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: z, Now: now, ExpiresAt: now.Add(retention)}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("lifetime %d: zombie token %d completed over owner %d: %v", life, z, tok, err)
			}
			if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: z, Now: now, LeaseUntil: now.Add(lease)}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("lifetime %d: zombie token %d renewed: %v", life, z, err)
			}
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: z, Now: now}); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("lifetime %d: zombie token %d released: %v", life, z, err)
			}
		}
		if r := mustGet(t, s, k); r.Token != tok || r.State != idem.StateInProgress {
			t.Fatalf("lifetime %d: record after zombies %+v, want in progress with token %d", life, r, tok)
		}
		zombies = append(zombies, tok)
		// The owner fails and releases; the record expires and is swept
		// (a crashed owner's record would stay: only settled records
		// expire).
		if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: tok, Now: at.Add(time.Millisecond)}); err != nil {
			t.Fatalf("lifetime %d: Release: %v", life, err)
		}
		at = at.Add(2 * lease)
		if n, err := s.Sweep(ctx, idem.SweepRequest{Now: at, Limit: 10}); err != nil || n != 1 {
			t.Fatalf("lifetime %d: Sweep = %d, %v; want 1", life, n, err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("lifetime %d: Get after sweep = %v", life, err)
		}
	}
}

// testTokenAcrossExpiry: a completed record that expired and is claimed
// again (not swept) gives the new owner a token no zombie holds.
func testTokenAcrossExpiry(t *testing.T, s idem.Store) {
	k := key("expired-again")
	first := mustClaim(t, s, claimReq(k, "fp", T0), idem.ClaimAcquired)
	// A zombie of the first lifetime: a retake gave the key to a second owner.
	second := mustClaim(t, s, claimReq(k, "fp", T0.Add(lease+time.Second)), idem.ClaimAcquired)
	mustComplete(t, s, k, second.Record.Token, nil, T0.Add(lease+2*time.Second))
	later := T0.Add(lease + 2*time.Second + retention + time.Second)
	third := mustClaim(t, s, claimReq(k, "fp2", later), idem.ClaimAcquired)
	if third.Record.Token == first.Record.Token || third.Record.Token == second.Record.Token {
		t.Fatalf("new lifetime token %d repeats %d or %d", third.Record.Token, first.Record.Token, second.Record.Token)
	}
	if third.Record.Fingerprint != "fp2" {
		t.Fatalf("a new lifetime keeps the old fingerprint %q", third.Record.Fingerprint)
	}
	for _, z := range []int64{first.Record.Token, second.Record.Token} {
		err := s.Complete(context.Background(), idem.CompleteRequest{Key: k, Token: z, Now: later, ExpiresAt: later.Add(retention)})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("zombie token %d completed the new lifetime: %v", z, err)
		}
	}
}

// testFingerprintSticks: the content a key was first claimed with sticks to
// it through releases and retakes until the record expires.
func testFingerprintSticks(t *testing.T, s idem.Store) {
	ctx := context.Background()
	k := key("sticky")
	c := mustClaim(t, s, claimReq(k, "fpA", T0), idem.ClaimAcquired)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: T0}); err != nil {
		t.Fatal(err)
	}
	c2 := mustClaim(t, s, claimReq(k, "fpB", T0.Add(time.Second)), idem.ClaimAcquired)
	if c2.Record.Fingerprint != "fpA" {
		t.Fatalf("released record reclaimed with other content took fingerprint %q, want fpA", c2.Record.Fingerprint)
	}
	if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c2.Record.Token, Now: T0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, s, k); r.Fingerprint != "fpA" {
		t.Fatalf("after a second release: fingerprint %q, want fpA", r.Fingerprint)
	}
	c3 := mustClaim(t, s, claimReq(k, "fpB", T0.Add(2*time.Second)), idem.ClaimAcquired)
	// The lease ends; a retake keeps it too.
	c4 := mustClaim(t, s, claimReq(k, "fpC", T0.Add(2*time.Second+lease)), idem.ClaimAcquired)
	if !c4.Retaken || c4.Record.Fingerprint != "fpA" || c4.Record.Token == c3.Record.Token {
		t.Fatalf("retake: %+v", c4)
	}
	// A record with no fingerprint takes the first one offered.
	n := key("no-fp")
	nc := mustClaim(t, s, claimReq(n, "", T0), idem.ClaimAcquired)
	if err := s.Release(ctx, idem.ReleaseRequest{Key: n, Token: nc.Record.Token, Now: T0}); err != nil {
		t.Fatal(err)
	}
	if nc2 := mustClaim(t, s, claimReq(n, "fpN", T0.Add(time.Second)), idem.ClaimAcquired); nc2.Record.Fingerprint != "fpN" {
		t.Fatalf("released record without a fingerprint: reclaimed with %q", nc2.Record.Fingerprint)
	}
}

// oddFingerprints are fingerprints a FingerprintFunc may return that are not
// plain text.
func oddFingerprints() map[string]string {
	sum := sha256.Sum256([]byte("payload"))
	return map[string]string{
		"raw digest":   string(sum[:]),
		"NUL bytes":    "a\x00b",
		"invalid UTF8": "\xff\xfe\xfd",
		"long":         strings.Repeat("f", 5000),
	}
}

// testFingerprintBytes: any bytes a FingerprintFunc returns are stored:
// equal ones compare equal after the round trip.
func testFingerprintBytes(t *testing.T, s idem.Store) {
	i := 0
	for name, fp := range oddFingerprints() {
		i++
		k := key(fmt.Sprintf("odd-fp-%d", i))
		c, err := s.Claim(context.Background(), claimReq(k, fp, T0))
		if err != nil {
			t.Fatalf("Claim with a %s fingerprint: %v", name, err)
		}
		mustComplete(t, s, k, c.Record.Token, nil, T0)
		d := mustClaim(t, s, claimReq(k, fp, T0.Add(time.Second)), idem.ClaimDuplicate)
		want := storekit.StoredFingerprint(fp)
		if d.Record.Fingerprint != want || mustGet(t, s, k).Fingerprint != want {
			t.Fatalf("%s fingerprint stored as %q, want %q", name, d.Record.Fingerprint, want)
		}
	}
}

// testHashedIDsDisjoint: a short id spelled like the stored form of a long
// one names its own record.
func testHashedIDsDisjoint(t *testing.T, s idem.Store) {
	long := key(strings.Repeat("L", idem.MaxIDLen+50))
	c := mustClaim(t, s, claimReq(long, "", T0), idem.ClaimAcquired)
	mustComplete(t, s, long, c.Record.Token, []byte("long"), T0)
	lookalike := key(long.StoredID())
	// On a shared stored id this would be the long id's duplicate.
	mustClaim(t, s, claimReq(lookalike, "", T0.Add(time.Second)), idem.ClaimAcquired)
	if got := mustGet(t, s, lookalike); got.Key().ID != lookalike.ID {
		t.Fatalf("lookalike record shows id %q, want %q", got.Key().ID, lookalike.ID)
	}
	if got := mustGet(t, s, long); got.Key().ID != long.ID || string(got.Result) != "long" {
		t.Fatalf("long id record = %+v", got)
	}
}

// testClockSkew: a caller whose clock is skew away from the server's, with a
// retention shorter than the skew, still finds its record for the
// retention measured by its own clock: at most one owner, and duplicates
// are recognised.
func testClockSkew(t *testing.T, s idem.Store, skew time.Duration) {
	ctx := context.Background()
	now := time.Now().Add(skew).Truncate(time.Millisecond)
	k := key("skewed")
	req := claimReq(k, "fp", now)
	req.ExpiresAt = now.Add(time.Minute) // retention shorter than the skew
	c := mustClaim(t, s, req, idem.ClaimAcquired)
	req2 := claimReq(k, "fp", now.Add(time.Millisecond))
	req2.ExpiresAt = now.Add(time.Minute)
	mustClaim(t, s, req2, idem.ClaimInProgress)
	done := now.Add(2 * time.Millisecond)
	if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: done, ExpiresAt: done.Add(time.Minute)}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	req3 := claimReq(k, "fp", done.Add(time.Millisecond))
	req3.ExpiresAt = done.Add(time.Minute)
	mustClaim(t, s, req3, idem.ClaimDuplicate)
	// Through the guard: many deliveries, one run.
	g := newGuard(t, s, idem.Options{Retention: time.Minute, Clock: func() time.Time { return time.Now().Add(skew) }})
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = g.Do(ctx, idem.Message{ID: "skewed-guard", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
				runs.Add(1)
				return nil, nil
			})
		}()
	}
	wg.Wait()
	for range 3 {
		if res, err := g.Do(ctx, idem.Message{ID: "skewed-guard", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, nil
		}); err != nil || res.Outcome != idem.OutcomeDuplicate {
			t.Fatalf("later delivery: %v, %v; want duplicate", res.Outcome, err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times with the caller's clock %v off the server's, want 1", n, skew)
	}
}

// testGuardLongHandler: a handler that outlives the retention, its lease
// renewed by the guard's heartbeat, keeps its key: a redelivery meanwhile
// sees it in progress and never runs the handler a second time.
func testGuardLongHandler(t *testing.T, s idem.Store) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := T0
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	rs := &renewSpy{Store: s, renewed: make(chan time.Time, 16)}
	// A retention of 5 s: a store with a native expiry counted in real time
	// from each renewal (Redis) keeps the key through a renewal that runs a
	// few seconds late on a loaded machine. A lease of 1 s: the heartbeat
	// renews every 333 ms of real time and keeps the lease through a
	// renewal that takes up to 450 ms (an embedded server under -race on
	// a loaded machine); with 300 ms, one renewal over 135 ms let the lease
	// run out and the case failed waiting for renewals that had stopped.
	g := newGuard(t, rs, idem.Options{Lease: time.Second, Retention: 5 * time.Second, Clock: now})
	msg := idem.Message{ID: "long-handler", Payload: []byte("x")}
	second := make(chan idem.Result, 1)
	res, err := g.Do(ctx, msg, func(ctx context.Context) ([]byte, error) {
		// Live for four retentions, each step renewed before the next.
		for range 4 {
			advance(500 * time.Millisecond)
			if !rs.waitRenewal(t, now()) {
				second <- idem.Result{}
				return nil, errors.New("renewals stopped")
			}
			advance(4500 * time.Millisecond)
			if !rs.waitRenewal(t, now()) {
				second <- idem.Result{}
				return nil, errors.New("renewals stopped")
			}
		}
		r, err := g.Do(ctx, msg, func(context.Context) ([]byte, error) {
			t.Error("a second run of the handler while the first holds a live lease")
			return nil, nil
		})
		if !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("redelivery during the long handler: %v, %v; want ErrInProgress", r.Outcome, err)
		}
		second <- r
		return []byte("ok"), nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("long handler: %v, %v", res.Outcome, err)
	}
	<-second
}

// renewSpy reports the time of each successful renewal.
type renewSpy struct {
	idem.Store
	renewed chan time.Time
}

func (r *renewSpy) Renew(ctx context.Context, req idem.RenewRequest) error {
	err := r.Store.Renew(ctx, req)
	if err == nil {
		select {
		case r.renewed <- req.Now:
		default:
		}
	}
	return err
}

// waitRenewal waits for a renewal made at at or later (by the guard's
// clock), and reports whether one came; the test has failed when not.
func (r *renewSpy) waitRenewal(t *testing.T, at time.Time) bool {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-r.renewed:
			if !got.Before(at) {
				return true
			}
		case <-timeout:
			t.Error("no lease renewal within 30s")
			return false
		}
	}
}

// testGuardConflictAfterCrash: A's owner crashes before Complete; B reuses
// A's id with other content. B is a conflict every time (never processed);
// A's own redelivery (the guard retakes stale claims: StaleRetake) is
// processed, not dead-lettered.
func testGuardConflictAfterCrash(t *testing.T, s idem.Store) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := T0
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	g := newGuard(t, s, idem.Options{Lease: time.Second, Clock: now, Stale: idem.StaleRetake})
	a := idem.Message{ID: "order-7", Payload: []byte("A: charge 10")}
	b := idem.Message{ID: "order-7", Payload: []byte("B: charge 99")}
	// A's owner claims and crashes (no Complete, no Release).
	k, _ := g.Key(a)
	fpA, _ := g.Fingerprint(a)
	crash := claimReq(k, fpA, now())
	crash.LeaseUntil = now().Add(time.Second)
	if _, err := s.Claim(ctx, crash); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second) // the lease ended
	mu.Unlock()
	for i := range 3 {
		res, err := g.Do(ctx, b, func(context.Context) ([]byte, error) {
			t.Fatalf("B (other content) processed on delivery %d", i+1)
			return nil, nil
		})
		if !errors.Is(err, idem.ErrConflict) {
			t.Fatalf("B delivery %d: %v, %v; want conflict", i+1, res.Outcome, err)
		}
	}
	ran := 0
	res, err := g.Do(ctx, a, func(context.Context) ([]byte, error) { ran++; return nil, nil })
	if err != nil || res.Outcome != idem.OutcomeProcessed || ran != 1 {
		t.Fatalf("A's redelivery: %v, %v (ran %d); want processed", res.Outcome, err, ran)
	}
}

// testGuardRawFingerprint: a FingerprintFunc returning raw digest bytes
// works on every store: processed, then duplicate, and other content is a
// conflict — never a store error that would be retried forever.
func testGuardRawFingerprint(t *testing.T, s idem.Store) {
	ctx := context.Background()
	raw := func(m idem.Message) (string, error) {
		sum := sha256.Sum256(m.Payload)
		return string(sum[:]), nil
	}
	g := newGuard(t, s, idem.Options{Fingerprint: raw})
	run := func(payload string) (idem.Result, error) {
		return g.Do(ctx, idem.Message{ID: "raw-fp", Payload: []byte(payload)}, func(context.Context) ([]byte, error) {
			return []byte("r"), nil
		})
	}
	if res, err := run("one"); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first: %v, %v", res.Outcome, err)
	}
	if res, err := run("one"); err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("same content: %v, %v; want duplicate", res.Outcome, err)
	}
	if res, err := run("two"); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("other content: %v, %v; want conflict", res.Outcome, err)
	}
}

// testGuardCompleteReplyLost: a Complete that committed but whose reply was
// lost is reported as processed, not as a lost lease.
func testGuardCompleteReplyLost(t *testing.T, s idem.Store) {
	ls := &lostReply{Store: s}
	g := newGuard(t, ls, idem.Options{})
	res, err := g.Do(context.Background(), idem.Message{ID: "lost-reply", Payload: []byte("x")}, func(context.Context) ([]byte, error) {
		return []byte("v"), nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "v" {
		t.Fatalf("Do after a lost Complete reply: %v, %v; want processed", res.Outcome, err)
	}
	if !ls.lost.Load() {
		t.Fatal("the Complete reply was never lost")
	}
}

// lostReply commits the first Complete and then reports a failure, as a
// connection that drops after the commit does.
type lostReply struct {
	idem.Store
	lost atomic.Bool
}

func (l *lostReply) Complete(ctx context.Context, req idem.CompleteRequest) error {
	err := l.Store.Complete(ctx, req)
	if err == nil && l.lost.CompareAndSwap(false, true) {
		return errors.New("connection reset by peer")
	}
	return err
}
