package redisidem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// These tests run on real time: Redis's own countdown is what they check.

// TestSkewedClockKeepsItsRetention: a caller whose clock is an hour behind
// or ahead of Redis's, with a retention (2 s) far shorter than the skew,
// finds its record for the retention measured by its own clock — not
// deleted at once (clock behind: the old absolute PXAT was already past),
// not kept an hour longer (clock ahead) — and Redis removes it once that
// retention is over.
func TestSkewedClockKeepsItsRetention(t *testing.T) { testSkewedClockKeepsItsRetention(t, standalone) }

func testSkewedClockKeepsItsRetention(t *testing.T, on backend) {
	for name, skew := range map[string]time.Duration{"behind": -time.Hour, "ahead": time.Hour} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := on.client(t)
			s := newStore(t, c)
			ctx := context.Background()
			clock := func() time.Time { return time.Now().Add(skew) }
			const retention = 2 * time.Second
			k := idem.Key{Scope: "skew", ID: name}
			claim := func() idem.Claim {
				t.Helper()
				now := clock()
				cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
					LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(retention), TakeOverStale: true})
				if err != nil {
					t.Fatal(err)
				}
				return cl
			}
			first := claim()
			if first.Outcome != idem.ClaimAcquired {
				t.Fatalf("first claim: %v", first.Outcome)
			}
			if d, _ := c.PTTL(ctx, s.Key(k)).Result(); d != -1 {
				t.Fatalf("PTTL after the claim = %v, want none (-1): an in-progress record never expires", d)
			}
			time.Sleep(500 * time.Millisecond)
			if cl := claim(); cl.Outcome != idem.ClaimInProgress || cl.Record.Token != first.Record.Token {
				t.Fatalf("second claimer inside the lease: %v (token %d); want in progress under %d",
					cl.Outcome, cl.Record.Token, first.Record.Token)
			}
			done := clock()
			if err := s.Complete(ctx, idem.CompleteRequest{Key: k, Token: first.Record.Token, Now: done, ExpiresAt: done.Add(retention)}); err != nil {
				t.Fatal(err)
			}
			if d, _ := c.PTTL(ctx, s.Key(k)).Result(); d <= retention-200*time.Millisecond || d > retention {
				t.Fatalf("PTTL after the completion = %v, want about %v", d, retention)
			}
			time.Sleep(retention / 2)
			if cl := claim(); cl.Outcome != idem.ClaimDuplicate {
				t.Fatalf("redelivery inside the retention: %v; want duplicate", cl.Outcome)
			}
			time.Sleep(retention/2 + 500*time.Millisecond) // the retention from done is over
			if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("Get after the retention: %v; want ErrNotFound (Redis removed it)", err)
			}
		})
	}
}

// TestRenewKeepsKeyPastRetention: a handler that runs far longer than the
// retention, renewing its lease, keeps its key in Redis (the key has no TTL
// while in progress) and its claim: another consumer sees it in progress the
// whole time. Renewals alternate between the store that claimed (its
// compare-and-set path) and another one (the script's parsing path). When
// the renewals stop (the owner crashed), the key stays, stale, with no TTL:
// only settled records expire. A retake and a release then give it one.
func TestRenewKeepsKeyPastRetention(t *testing.T) { testRenewKeepsKeyPastRetention(t, standalone) }

func testRenewKeepsKeyPastRetention(t *testing.T, on backend) {
	a, b := twoStores(t, on)
	c := on.client(t)
	ctx := context.Background()
	clock := func() time.Time { return time.Now().Add(-time.Hour) } // behind Redis's, for good measure
	const (
		lease     = 300 * time.Millisecond
		retention = 200 * time.Millisecond
	)
	k := idem.Key{Scope: "long", ID: "job"}
	now := clock()
	first, err := a.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(retention)})
	if err != nil || first.Outcome != idem.ClaimAcquired {
		t.Fatalf("claim: %v, %v", first.Outcome, err)
	}
	end := time.Now().Add(6 * lease)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(lease / 3)
		via := a
		if i%2 == 1 {
			via = b
		}
		now := clock()
		if err := via.Renew(ctx, idem.RenewRequest{Key: k, Token: first.Record.Token, Now: now, LeaseUntil: now.Add(lease)}); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		cl, err := b.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(retention), TakeOverStale: true})
		if err != nil || cl.Outcome != idem.ClaimInProgress {
			t.Fatalf("claim during renewal %d: %v, %v; want in progress", i, cl.Outcome, err)
		}
		if r := cl.Record; r.ExpiresAt.Before(r.LeaseUntil) {
			t.Fatalf("renewal %d: expires %v before the lease ends %v", i, r.ExpiresAt, r.LeaseUntil)
		}
	}
	if d, _ := c.PTTL(ctx, a.Key(k)).Result(); d != -1 {
		t.Fatalf("PTTL after the renewals = %v, want none (-1): an in-progress record never expires", d)
	}
	// The owner crashed: long after its lease, the record is stale, not gone.
	later := clock().Add(time.Hour)
	re, err := b.Claim(ctx, idem.ClaimRequest{Key: k, Now: later, LeaseUntil: later.Add(lease), ExpiresAt: later.Add(retention), TakeOverStale: true})
	if err != nil || re.Outcome != idem.ClaimAcquired || !re.Retaken {
		t.Fatalf("claim an hour after the last lease: %v retaken=%v, %v; want a retake", re.Outcome, re.Retaken, err)
	}
	if d, _ := c.PTTL(ctx, a.Key(k)).Result(); d != -1 {
		t.Fatalf("PTTL after the retake = %v, want none (-1)", d)
	}
	if err := b.Release(ctx, idem.ReleaseRequest{Key: k, Token: re.Record.Token, Now: later}); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.PTTL(ctx, a.Key(k)).Result(); d <= 0 || d > retention+lease {
		t.Fatalf("PTTL after the release = %v, want what is left of the retention", d)
	}
}
