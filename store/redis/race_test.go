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

// twoStores returns two stores on one prefix through two separate clients
// (two connection pools), as two consumer processes would have.
func twoStores(t *testing.T, on backend) (a, b *redisidem.Store) {
	t.Helper()
	ca, cb := on.client(t), on.client(t)
	p := uniquePrefix(t, ca)
	var err error
	if a, err = redisidem.New(ca, redisidem.Options{Prefix: p}); err != nil {
		t.Fatal(err)
	}
	if b, err = redisidem.New(cb, redisidem.Options{Prefix: p}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// race runs fa and fb at the same moment and waits for both.
func race(fa, fb func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, f := range []func(){fa, fb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f()
		}()
	}
	close(start)
	wg.Wait()
}

// TestTwoClientsRaceToClaim: two clients claim each of 2000 fresh keys at
// the same moment; exactly one acquires each key and the other sees it in
// progress under the winner's token.
func TestTwoClientsRaceToClaim(t *testing.T) { testTwoClientsRaceToClaim(t, standalone) }

func testTwoClientsRaceToClaim(t *testing.T, on backend) {
	a, b := twoStores(t, on)
	ctx := context.Background()
	const keys = 2000
	now := storetest.T0
	wins := [2]int{}
	for i := range keys {
		req := idem.ClaimRequest{
			Key: idem.Key{Scope: "race", ID: fmt.Sprintf("k-%d", i)}, Fingerprint: "fp",
			Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour), TakeOverStale: true,
		}
		var ca, cb idem.Claim
		var ea, eb error
		race(func() { ca, ea = a.Claim(ctx, req) }, func() { cb, eb = b.Claim(ctx, req) })
		if ea != nil || eb != nil {
			t.Fatalf("key %d: errors %v / %v", i, ea, eb)
		}
		winner, loser := ca, cb
		if cb.Outcome == idem.ClaimAcquired {
			winner, loser = cb, ca
			wins[1]++
		} else {
			wins[0]++
		}
		if winner.Outcome != idem.ClaimAcquired || loser.Outcome != idem.ClaimInProgress ||
			winner.Record.Token < 1 || loser.Record.Token != winner.Record.Token {
			t.Fatalf("key %d: outcomes %v (token %d) / %v (token %d), want one acquired and one in progress",
				i, ca.Outcome, ca.Record.Token, cb.Outcome, cb.Record.Token)
		}
	}
	t.Logf("wins: client a %d, client b %d", wins[0], wins[1])
}

// TestRaceRetakeAgainstLateComplete: the first owner completes just as its
// lease ends while a second client retakes the key. Fencing admits exactly
// one: either the completion lands and the retake finds a duplicate, or the
// retake lands and the completion gets ErrLeaseLost.
func TestRaceRetakeAgainstLateComplete(t *testing.T) {
	testRaceRetakeAgainstLateComplete(t, standalone)
}

func testRaceRetakeAgainstLateComplete(t *testing.T, on backend) {
	a, b := twoStores(t, on)
	ctx := context.Background()
	const keys = 1000
	now := storetest.T0
	later := now.Add(time.Minute)
	outcomes := map[string]int{}
	for i := range keys {
		k := idem.Key{Scope: "fence", ID: fmt.Sprintf("k-%d", i)}
		req := idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now, LeaseUntil: later, ExpiresAt: now.Add(time.Hour), TakeOverStale: true}
		first, err := a.Claim(ctx, req)
		if err != nil || first.Outcome != idem.ClaimAcquired {
			t.Fatalf("first claim: %v %v", first.Outcome, err)
		}
		retake := req
		retake.Now, retake.LeaseUntil = later, later.Add(time.Minute)
		var cerr, rerr error
		var rc idem.Claim
		race(func() {
			cerr = a.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Result: []byte("a"), Now: later, ExpiresAt: later.Add(time.Hour)})
		}, func() {
			rc, rerr = b.Claim(ctx, retake)
		})
		if rerr != nil || (cerr != nil && !errors.Is(cerr, idem.ErrLeaseLost)) {
			t.Fatalf("key %d: complete %v, retake %v", i, cerr, rerr)
		}
		got, err := a.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case cerr == nil && rc.Outcome == idem.ClaimDuplicate && got.State == idem.StateCompleted && got.Token == first.Record.Token:
			outcomes["completed first"]++
		case errors.Is(cerr, idem.ErrLeaseLost) && rc.Outcome == idem.ClaimAcquired && rc.Retaken &&
			got.State == idem.StateInProgress && got.Token == first.Record.Token+1:
			outcomes["retaken first"]++
		default:
			t.Fatalf("key %d: complete %v, retake %v (token %d), record %+v", i, cerr, rc.Outcome, rc.Record.Token, got)
		}
	}
	t.Logf("orderings seen: %v", outcomes)
}

// TestGuardAcrossClients: two Guards on two clients deliver each message at
// once; the handler runs once per message.
func TestGuardAcrossClients(t *testing.T) { testGuardAcrossClients(t, standalone) }

func testGuardAcrossClients(t *testing.T, on backend) {
	a, b := twoStores(t, on)
	ctx := context.Background()
	ga, err := idem.New(a, idem.Options{Scope: "mailer"})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := idem.New(b, idem.Options{Scope: "mailer"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(id string) func(context.Context) ([]byte, error) {
		return func(context.Context) ([]byte, error) {
			mu.Lock()
			runs[id]++
			mu.Unlock()
			return []byte("sent"), nil
		}
	}
	for i := range 300 {
		id := fmt.Sprintf("m-%d", i)
		msg := idem.Message{ID: id, Payload: []byte(id)}
		var ra, rb idem.Result
		var ea, eb error
		race(func() { ra, ea = ga.Do(ctx, msg, h(id)) }, func() { rb, eb = gb.Do(ctx, msg, h(id)) })
		for _, e := range []error{ea, eb} {
			if e != nil && !errors.Is(e, idem.ErrInProgress) {
				t.Fatalf("%s: %v", id, e)
			}
		}
		if runs[id] != 1 {
			t.Fatalf("%s: handler ran %d times (outcomes %v, %v)", id, runs[id], ra.Outcome, rb.Outcome)
		}
	}
}
