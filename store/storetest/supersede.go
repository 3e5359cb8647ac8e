package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// The conflict workflow: an operator accepts a dead-lettered content as a
// key's new truth (idem.Superseder). The settled record is released with
// the new fingerprint, so the replayed dead letter is claimed and
// processed once, and the content the key held before is the conflict from
// then on. Only the record the operator read (its token) is changed, never
// one an owner may be running.

// supersedeTests are run by Run.
var supersedeTests = []struct {
	name string
	fn   func(t *testing.T, s idem.Store)
}{
	{"SupersedeSettled", testSupersedeSettled},
	{"SupersedeOnlyReadSettled", testSupersedeOnlyReadSettled},
	{"SupersedeStoredFingerprint", testSupersedeStoredFingerprint},
	{"SupersedeRacingClaims", testSupersedeRacingClaims},
	{"GuardSupersedeWorkflow", testGuardSupersede},
}

// superseder returns s as an idem.Superseder, or skips: the capability is
// optional for stores outside this module (idem resolve --supersede and
// the console's action need it).
func superseder(t *testing.T, s idem.Store) idem.Superseder {
	t.Helper()
	ss, ok := s.(idem.Superseder)
	if !ok {
		t.Skipf("%T is not an idem.Superseder (an operator cannot accept a conflict's content)", s)
	}
	return ss
}

func supersedeReq(k idem.Key, token int64, fp string, now time.Time) idem.SupersedeRequest {
	return idem.SupersedeRequest{Key: k, Token: token, Fingerprint: fp, Now: now}
}

// A completed record, and a released one, become released with the new
// content and no result; token, attempts, creation and retention stay. The
// next claim takes the record as any released one (token+1, the new
// content kept), and the retention ends when it always would.
func testSupersedeSettled(t *testing.T, s idem.Store) {
	ss := superseder(t, s)
	ctx := context.Background()
	for _, settle := range []string{"completed", "released"} {
		t.Run(settle, func(t *testing.T) {
			k := key("settled-" + settle)
			c := mustClaim(t, s, claimReq(k, "fp-old", T0), idem.ClaimAcquired)
			done := T0.Add(time.Second)
			if settle == "completed" {
				mustComplete(t, s, k, c.Record.Token, []byte("old-result"), done) // expires at done + retention
			} else if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: done}); err != nil {
				t.Fatal(err)
			}
			before := mustGet(t, s, k)
			at := T0.Add(time.Hour)
			if err := ss.Supersede(ctx, supersedeReq(k, c.Record.Token, "fp-new", at)); err != nil {
				t.Fatalf("Supersede of a %s record under its token: %v", settle, err)
			}
			r := mustGet(t, s, k)
			if r.State != idem.StateReleased || r.Fingerprint != "fp-new" || len(r.Result) != 0 {
				t.Fatalf("after Supersede: %+v, want released with fingerprint fp-new and no result", r)
			}
			if r.Token != before.Token || r.Attempts != before.Attempts || !sameTime(r.CreatedAt, before.CreatedAt) ||
				!sameTime(r.ExpiresAt, before.ExpiresAt) {
				t.Fatalf("after Supersede: %+v, want token, attempts, created and expires of %+v kept", r, before)
			}
			if !sameTime(r.LeaseUntil, at) || !sameTime(r.UpdatedAt, at) {
				t.Fatalf("after Supersede at %v: lease until %v, updated %v, want both at it", at, r.LeaseUntil, r.UpdatedAt)
			}
			// A repeat is harmless: the record is released under the
			// same token, with the same content.
			if err := ss.Supersede(ctx, supersedeReq(k, c.Record.Token, "fp-new", at)); err != nil {
				t.Fatalf("repeated Supersede: %v", err)
			}
			// A sweep before the retention ends leaves it.
			if _, err := s.Sweep(ctx, idem.SweepRequest{Now: at, Limit: 100}); err != nil {
				t.Fatal(err)
			}
			// The next claim takes it as any released record, whatever
			// content it brings: the new fingerprint stays, for the
			// caller to compare.
			next := mustClaim(t, s, claimReq(k, "fp-old", at.Add(time.Second)), idem.ClaimAcquired)
			if next.Record.Token != c.Record.Token+1 || next.Record.Attempts != before.Attempts+1 ||
				next.Record.Fingerprint != "fp-new" || next.Retaken {
				t.Fatalf("claim after Supersede: %+v (retaken %v), want token %d, attempts %d, fingerprint fp-new",
					next.Record, next.Retaken, c.Record.Token+1, before.Attempts+1)
			}
			mustComplete(t, s, k, next.Record.Token, []byte("new-result"), at.Add(2*time.Second))
			d := mustClaim(t, s, claimReq(k, "fp-new", at.Add(3*time.Second)), idem.ClaimDuplicate)
			if string(d.Record.Result) != "new-result" || d.Record.Fingerprint != "fp-new" {
				t.Fatalf("duplicate after the superseded content completed: %+v", d.Record)
			}
		})
	}
	// Kept retention: a superseded record nobody claims expires when it
	// would have, and is swept then.
	k := key("superseded-expires")
	c := mustClaim(t, s, claimReq(k, "fp-old", T0), idem.ClaimAcquired)
	mustComplete(t, s, k, c.Record.Token, nil, T0)
	if err := ss.Supersede(ctx, supersedeReq(k, c.Record.Token, "fp-new", T0.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	end := T0.Add(retention)
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: end, Limit: 100}); err != nil || n != 1 {
		t.Fatalf("sweep at the superseded record's expiry: %d %v, want it deleted", n, err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("superseded record after the sweep at its expiry: %v, want ErrNotFound", err)
	}
}

// Only the settled record the operator read is superseded: none, an
// expired one, one in progress (live or stale: an owner may be running)
// or one under another token is refused, and nothing changes. A request
// without its time or content is invalid data.
func testSupersedeOnlyReadSettled(t *testing.T, s idem.Store) {
	ss := superseder(t, s)
	ctx := context.Background()
	if err := ss.Supersede(ctx, supersedeReq(key("absent"), 1<<40, "fp-new", T0)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Supersede of an absent key: %v, want ErrNotFound", err)
	}
	unchanged := func(what string, k idem.Key, want idem.Record) {
		t.Helper()
		got := mustGet(t, s, k)
		if got.State != want.State || got.Fingerprint != want.Fingerprint || got.Token != want.Token ||
			string(got.Result) != string(want.Result) || !sameTime(got.LeaseUntil, want.LeaseUntil) {
			t.Errorf("a refused Supersede (%s) changed the record: %+v, was %+v", what, got, want)
		}
	}

	held := key("held")
	c := mustClaim(t, s, claimReq(held, "fp-old", T0), idem.ClaimAcquired)
	was := mustGet(t, s, held)
	if err := ss.Supersede(ctx, supersedeReq(held, c.Record.Token, "fp-new", T0.Add(time.Second))); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Supersede of a live in-progress record under its token: %v, want ErrLeaseLost", err)
	}
	unchanged("live", held, was)
	stale := T0.Add(lease + time.Second)
	if err := ss.Supersede(ctx, supersedeReq(held, c.Record.Token, "fp-new", stale)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Supersede of a stale in-progress record under its token: %v, want ErrLeaseLost", err)
	}
	unchanged("stale", held, was)
	// However long ago the lease ended, past the retention too: stale,
	// never expired.
	if err := ss.Supersede(ctx, supersedeReq(held, c.Record.Token, "fp-new", T0.Add(2*retention))); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Supersede of an in-progress record past its retention: %v, want ErrLeaseLost", err)
	}
	unchanged("stale past retention", held, was)

	done := key("done")
	c = mustClaim(t, s, claimReq(done, "fp-old", T0), idem.ClaimAcquired)
	mustComplete(t, s, done, c.Record.Token, []byte("r"), T0)
	was = mustGet(t, s, done)
	for _, tok := range []int64{c.Record.Token + 1, c.Record.Token - 1} {
		if err := ss.Supersede(ctx, supersedeReq(done, tok, "fp-new", T0)); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Supersede under token %d of a record completed under %d: %v, want ErrLeaseLost", tok, c.Record.Token, err)
		}
	}
	unchanged("other token", done, was)
	for name, req := range map[string]idem.SupersedeRequest{
		"zero Now":          supersedeReq(done, c.Record.Token, "fp-new", time.Time{}),
		"empty Fingerprint": supersedeReq(done, c.Record.Token, "", T0),
	} {
		var ide *idem.InvalidDataError
		if err := ss.Supersede(ctx, req); !errors.As(err, &ide) {
			t.Errorf("Supersede with %s: %v, want an *idem.InvalidDataError", name, err)
		}
	}
	if err := ss.Supersede(ctx, supersedeReq(idem.Key{Scope: "orders"}, c.Record.Token, "fp-new", T0)); !errors.Is(err, idem.ErrNoKey) {
		t.Errorf("Supersede of a key without an id: %v, want ErrNoKey", err)
	}
	unchanged("invalid request", done, was)

	// Expired (not swept yet): its retention is over, whatever content it
	// had; the next claim starts a new lifetime with its own.
	end := T0.Add(retention)
	if err := ss.Supersede(ctx, supersedeReq(done, c.Record.Token, "fp-new", end)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Supersede of an expired record: %v, want ErrNotFound", err)
	}
	if r, err := s.Get(ctx, done); err == nil && (r.State != idem.StateCompleted || r.Fingerprint != "fp-old") {
		t.Errorf("a refused Supersede of an expired record changed it: %+v", r)
	}
	next := mustClaim(t, s, claimReq(done, "fp-next", end), idem.ClaimAcquired)
	mustComplete(t, s, done, next.Record.Token, nil, end)
	if err := ss.Supersede(ctx, supersedeReq(done, c.Record.Token, "fp-new", end)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Supersede under the earlier lifetime's token: %v, want ErrLeaseLost", err)
	}
	if r := mustGet(t, s, done); r.Fingerprint != "fp-next" || r.State != idem.StateCompleted {
		t.Errorf("Supersede under the earlier lifetime's token changed the record: %+v", r)
	}
}

// Any content a FingerprintFunc returns can be accepted: the store keeps it
// as a claim with that content keeps it (storekit.StoredFingerprint), so a
// redelivery of the accepted content matches it.
func testSupersedeStoredFingerprint(t *testing.T, s idem.Store) {
	ss := superseder(t, s)
	ctx := context.Background()
	i := 0
	for name, fp := range oddFingerprints() {
		i++
		k := key(fmt.Sprintf("odd-supersede-%d", i))
		c := mustClaim(t, s, claimReq(k, "fp-old", T0), idem.ClaimAcquired)
		mustComplete(t, s, k, c.Record.Token, nil, T0)
		if err := ss.Supersede(ctx, supersedeReq(k, c.Record.Token, fp, T0.Add(time.Second))); err != nil {
			t.Fatalf("Supersede with a %s fingerprint: %v", name, err)
		}
		want := storekit.StoredFingerprint(fp)
		if got := mustGet(t, s, k).Fingerprint; got != want {
			t.Fatalf("%s fingerprint superseded as %q, want %q", name, got, want)
		}
		if a := mustClaim(t, s, claimReq(k, fp, T0.Add(2*time.Second)), idem.ClaimAcquired); a.Record.Fingerprint != want {
			t.Fatalf("claim with the accepted %s content: fingerprint %q, want %q", name, a.Record.Fingerprint, want)
		}
	}
}

// A Supersede racing claims of the key never makes two owners and never
// takes a key from one: claims before it find the record completed (a
// duplicate) or take the released record with its old content, and then
// Supersede is refused; claims after it see the new content, and one of
// them takes the key.
func testSupersedeRacingClaims(t *testing.T, s idem.Store) {
	ss := superseder(t, s)
	ctx := context.Background()
	const rounds, claimers = 8, 8
	for round := range rounds {
		settle := []string{"completed", "released"}[round%2]
		k := key(fmt.Sprintf("race-%d", round))
		c := mustClaim(t, s, claimReq(k, "fp-old", T0), idem.ClaimAcquired)
		if settle == "completed" {
			mustComplete(t, s, k, c.Record.Token, []byte("old"), T0)
		} else if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: T0}); err != nil {
			t.Fatal(err)
		}
		now := T0.Add(time.Second)
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			mu       sync.Mutex
			acquired []idem.Claim
			supErr   error
		)
		wg.Add(claimers + 1)
		go func() {
			defer wg.Done()
			<-start
			supErr = ss.Supersede(ctx, supersedeReq(k, c.Record.Token, "fp-new", now))
		}()
		for range claimers {
			go func() {
				defer wg.Done()
				<-start
				cl, err := s.Claim(ctx, claimReq(k, "fp-new", now))
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if cl.Outcome == idem.ClaimAcquired {
					mu.Lock()
					acquired = append(acquired, cl)
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if supErr != nil && !errors.Is(supErr, idem.ErrLeaseLost) {
			t.Fatalf("round %d (%s): Supersede racing claims: %v, want nil or ErrLeaseLost", round, settle, supErr)
		}
		if len(acquired) > 1 {
			t.Fatalf("round %d (%s): %d claims acquired the key at once: %+v", round, settle, len(acquired), acquired)
		}
		r := mustGet(t, s, k)
		switch {
		case supErr == nil && len(acquired) == 1:
			// Superseded, then taken: the owner runs the new content.
			if a := acquired[0].Record; a.Fingerprint != "fp-new" || a.Token != c.Record.Token+1 ||
				r.State != idem.StateInProgress || r.Token != a.Token || r.Fingerprint != "fp-new" {
				t.Fatalf("round %d (%s): superseded and claimed: claim %+v, record %+v", round, settle, a, r)
			}
		case supErr == nil:
			// Superseded after every claim found the record completed.
			if settle != "completed" || r.State != idem.StateReleased || r.Fingerprint != "fp-new" || r.Token != c.Record.Token {
				t.Fatalf("round %d (%s): superseded, nobody claimed: record %+v", round, settle, r)
			}
		case len(acquired) == 1:
			// Taken first (released): Supersede found an owner and left it.
			if a := acquired[0].Record; settle != "released" || a.Fingerprint != "fp-old" ||
				r.State != idem.StateInProgress || r.Token != a.Token || r.Fingerprint != "fp-old" {
				t.Fatalf("round %d (%s): refused Supersede: claim %+v, record %+v", round, settle, a, r)
			}
		default:
			t.Fatalf("round %d (%s): Supersede refused and nobody acquired: record %+v", round, settle, r)
		}
	}
}

// The conflict workflow through a guard: a key completed with content A
// refuses content B as a conflict; once an operator supersedes the record
// with B's fingerprint (from the conflict's error), the replayed B runs its
// handler once and completes under a new token, A is the conflict from
// then on, and B again is a duplicate.
func testGuardSupersede(t *testing.T, s idem.Store) {
	g := newGuard(t, s, idem.Options{})
	ctx := context.Background()
	a := idem.Message{ID: "order-7", Payload: []byte(`{"amount":10}`)}
	b := idem.Message{ID: "order-7", Payload: []byte(`{"amount":12}`)}
	var runs []string
	handler := func(name string) idem.Handler {
		return func(context.Context) ([]byte, error) {
			runs = append(runs, name)
			return []byte("paid " + name), nil
		}
	}
	if res, err := g.Do(ctx, a, handler("a")); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("first delivery: %v %v", res.Outcome, err)
	}
	res, err := g.Do(ctx, b, handler("b"))
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || res.Outcome != idem.OutcomeConflict {
		t.Fatalf("other content under the key: %v %v, want a conflict", res.Outcome, err)
	}
	first := ce.Record
	fpB, err := g.Fingerprint(b)
	if err != nil {
		t.Fatal(err)
	}
	if ce.Fingerprint != fpB {
		t.Fatalf("the conflict's fingerprint %q is not the guard's fingerprint of its message %q", ce.Fingerprint, fpB)
	}

	// The operator accepts B: the conflict's key, the token of the record
	// it showed, and the dead letter's fingerprint.
	err = idem.Supersede(ctx, s, idem.SupersedeRequest{Key: ce.Key, Token: first.Token, Fingerprint: ce.Fingerprint, Now: time.Now()})
	if err != nil {
		t.Fatalf("Supersede with the conflict's content: %v", err)
	}

	// The replay of B runs once, under a new token.
	res, err = g.Do(ctx, b, handler("b"))
	if err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "paid b" {
		t.Fatalf("replay of the accepted content: %v %q %v, want processed", res.Outcome, res.Value, err)
	}
	r := mustGet(t, s, ce.Key)
	if r.State != idem.StateCompleted || r.Fingerprint != fpB || r.Token <= first.Token || string(r.Result) != "paid b" {
		t.Fatalf("record after the replay: %+v, want completed with B's content under a token above %d", r, first.Token)
	}
	// A is the conflict now, and runs nothing.
	_, err = g.Do(ctx, a, handler("a"))
	if !errors.As(err, &ce) || ce.Record.Fingerprint != fpB {
		t.Fatalf("the first content after the supersede: %v, want a conflict with B's content stored", err)
	}
	// B again is a duplicate.
	res, err = g.Do(ctx, b, handler("b"))
	if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "paid b" {
		t.Fatalf("B again: %v %q %v, want a duplicate of its result", res.Outcome, res.Value, err)
	}
	if fmt.Sprint(runs) != "[a b]" {
		t.Fatalf("handlers ran %v, want [a b]: A once, B once after the supersede", runs)
	}
	// The operator's view of the first record is out of date now.
	err = idem.Supersede(ctx, s, idem.SupersedeRequest{Key: ce.Key, Token: first.Token, Fingerprint: ce.Fingerprint, Now: time.Now()})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Supersede under the token the operator read before the replay: %v, want ErrLeaseLost", err)
	}
}
