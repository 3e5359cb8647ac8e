package redisidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
)

func internalStore(t *testing.T) *Store {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.Redis.Need(t)})
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemtest:int:" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+":*").Result() // a handful of keys in a test
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	s, err := New(c, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPipelineLoadsMissingScript: a script Redis has never seen (as after a
// restart or failover) fails EVALSHA with NOSCRIPT inside a pipeline; the
// store sends exactly those calls again as EVAL, and each runs once.
func TestPipelineLoadsMissingScript(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	var b [8]byte
	_, _ = rand.Read(b[:])
	// A unique comment gives a SHA no server has cached.
	fresh := goredis.NewScript("-- " + hex.EncodeToString(b[:]) + "\nreturn redis.call('INCR', KEYS[1])")
	calls := make([]scriptCall, 5)
	for i := range calls {
		calls[i] = scriptCall{key: s.prefix + ":counter"}
	}
	cmds, err := s.evalPipelined(ctx, fresh, calls)
	if err != nil {
		t.Fatalf("evalPipelined: %v", err)
	}
	for i, c := range cmds {
		if v, err := c.Int64(); err != nil || v != int64(i+1) {
			t.Fatalf("call %d = %v, %v; want %d", i, v, err, i+1)
		}
	}
	// Each call ran exactly once.
	if n, _ := s.client.Get(ctx, s.prefix+":counter").Int64(); n != 5 {
		t.Fatalf("counter = %d, want 5", n)
	}
}

// pttl returns the key's remaining Redis lifetime.
func pttl(t *testing.T, s *Store, k idem.Key) time.Duration {
	t.Helper()
	d, err := s.client.PTTL(context.Background(), keyOf(s.prefix, k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// near reports whether the key's remaining lifetime is want, less at most
// the time the test took since it was set.
func near(got, want time.Duration) bool { return got <= want && got > want-5*time.Second }

// TestRedisTTLIsRelative: an in-progress record's key has no Redis expiry
// (claimed, renewed past the retention, reclaimed: an in-progress record
// never expires), and every write of a settled record sets it to ExpiresAt
// - Now of its request, whatever the caller's clock says the time is (here
// 2030): the completion and the release, on the compare-and-set path (the
// store that claimed) and on the parsing path (another store). The lease is
// a field, not the key's TTL. Never an absolute PXAT: with it this record
// would live until 2030.
func TestRedisTTLIsRelative(t *testing.T) {
	a := internalStore(t)
	b, err := New(a.client, Options{Prefix: a.prefix}) // same records, no held claims
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, via := range []*Store{a, b} {
		k := idem.Key{Scope: "ttl", ID: fmt.Sprintf("t%d", i)}
		c, err := a.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("claim: %v %v", c.Outcome, err)
		}
		if d := pttl(t, a, k); d != -1 {
			t.Fatalf("PTTL after claim = %v, want none (-1): in progress", d)
		}
		at := now.Add(30 * time.Minute)
		if err := via.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: at, LeaseUntil: at.Add(2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, k); d != -1 {
			t.Fatalf("PTTL after a renewal past the retention = %v, want none (-1): in progress", d)
		}
		if r, _ := a.Get(ctx, k); !r.ExpiresAt.Equal(at.Add(2 * time.Hour)) {
			t.Fatalf("renewed record expires %v, want the lease end %v", r.ExpiresAt, at.Add(2*time.Hour))
		}
		// A renewal that stays inside the retention leaves it.
		if err := via.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: at.Add(time.Minute), LeaseUntil: at.Add(2 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, k); d != -1 {
			t.Fatalf("PTTL after a short renewal = %v, want none (-1): in progress", d)
		}
		if err := via.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: at, ExpiresAt: at.Add(48 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, k); !near(d, 48*time.Hour) {
			t.Fatalf("PTTL after complete = %v, want 48h", d)
		}

		r := idem.Key{Scope: "ttl", ID: fmt.Sprintf("r%d", i)}
		c, err = a.Claim(ctx, idem.ClaimRequest{Key: r, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if err := via.Release(ctx, idem.ReleaseRequest{Key: r, Token: c.Record.Token, Now: now.Add(10 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, r); !near(d, 50*time.Minute) {
			t.Fatalf("PTTL after release = %v, want the retention end - Now (50m)", d)
		}
		// Reclaimed by the claim script: in progress again, so no expiry;
		// its release sets the request's retention from its Now.
		at = now.Add(20 * time.Minute)
		c, err = via.Claim(ctx, idem.ClaimRequest{Key: r, Now: at, LeaseUntil: at.Add(time.Second), ExpiresAt: at.Add(3 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, r); d != -1 {
			t.Fatalf("PTTL after a reclaim = %v, want none (-1): in progress", d)
		}
		if err := via.Release(ctx, idem.ReleaseRequest{Key: r, Token: c.Record.Token, Now: at}); err != nil {
			t.Fatal(err)
		}
		if d := pttl(t, a, r); !near(d, 3*time.Hour) {
			t.Fatalf("PTTL after the reclaim's release = %v, want 3h", d)
		}
	}
	// A retention already over by the caller's clock: the key lives 1 ms
	// (at least), not for ever and not a negative time.
	k := idem.Key{Scope: "ttl", ID: "over"}
	c, err := a.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: now, ExpiresAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, _ := a.client.Exists(ctx, keyOf(a.prefix, k)).Result(); n != 0 {
		t.Fatalf("a record completed with its retention over is still in Redis (PTTL %v)", pttl(t, a, k))
	}
}

// TestLiveLeaseNeverExpires: a record written before renewals carried the
// expiry along (in progress, expires_at before a live lease_until) counts as
// expired neither for a claim nor for the sweep, and its next renewal moves
// expires_at to the lease end and drops the key's Redis expiry. Once its
// lease ends it is stale, still never expired nor swept.
func TestLiveLeaseNeverExpires(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	k := idem.Key{Scope: "legacy", ID: "old-row"}
	old := idem.Record{Scope: k.Scope, ID: k.ID, DisplayID: k.ID, State: idem.StateInProgress, Fingerprint: "fp",
		Token: 7, Attempts: 1, LeaseUntil: t0.Add(time.Hour), ExpiresAt: t0.Add(time.Minute), CreatedAt: t0, UpdatedAt: t0}
	if err := s.client.Set(ctx, keyOf(s.prefix, k), encodeRecord(old), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(30 * time.Minute) // past expires_at, inside the lease
	for _, getMode := range []bool{false, true} {
		if getMode {
			s.dupGet.Start(dupGetClaims)
		}
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "other", Now: now, LeaseUntil: now.Add(time.Minute),
			ExpiresAt: now.Add(time.Hour), TakeOverStale: true})
		if err != nil || c.Outcome != idem.ClaimInProgress || c.Record.Token != 7 {
			t.Fatalf("claim inside the live lease (GET mode %v) = %v token %d, %v; want in progress under token 7",
				getMode, c.Outcome, c.Record.Token, err)
		}
	}
	cs, err := s.ClaimBatch(ctx, []idem.ClaimRequest{{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}})
	if err != nil || cs[0].Outcome != idem.ClaimInProgress {
		t.Fatalf("batch claim inside the live lease = %+v, %v", cs, err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 10}); n != 0 || err != nil {
		t.Fatalf("Sweep inside the live lease = %d, %v; want 0", n, err)
	}
	// The sweep script alone (the scan's pre-check aside) spares it too.
	if n, err := s.deleteExpired(ctx, []string{keyOf(s.prefix, k)}, now); n != 0 || err != nil {
		t.Fatalf("sweep script inside the live lease = %d, %v; want 0", n, err)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: k, Token: 7, Now: now, LeaseUntil: now.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, k)
	if err != nil || !r.ExpiresAt.Equal(now.Add(2*time.Hour)) || r.Fingerprint != "fp" {
		t.Fatalf("after renewal: %+v, %v; want expires_at at the lease end and the fingerprint kept", r, err)
	}
	if d := pttl(t, s, k); d != -1 {
		t.Fatalf("PTTL after the renewal = %v, want none (-1): in progress", d)
	}
	// Once the lease ends the record is stale: neither swept nor reborn.
	end := now.Add(2*time.Hour + time.Second)
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: end, Limit: 10}); n != 0 || err != nil {
		t.Fatalf("Sweep after the lease = %d, %v; want 0 (stale, not expired)", n, err)
	}
	if n, err := s.deleteExpired(ctx, []string{keyOf(s.prefix, k)}, end); n != 0 || err != nil {
		t.Fatalf("sweep script after the lease = %d, %v; want 0", n, err)
	}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: end, LeaseUntil: end.Add(time.Minute), ExpiresAt: end.Add(time.Hour)})
	if err != nil || c.Outcome != idem.ClaimStale || c.Record.Token != 7 {
		t.Fatalf("claim after the lease = %v token %d, %v; want stale under token 7", c.Outcome, c.Record.Token, err)
	}
}

// TestLuaCountsTokensExactly: tokens past 10^15 (where Lua's tostring
// switches to 1e+15 notation) and up to 2^53 - 1 are counted and written
// digit for digit by the scripts; the next one, which a double cannot hold
// apart from its neighbour, is refused as invalid data rather than rounded.
func TestLuaCountsTokensExactly(t *testing.T) {
	s := internalStore(t)
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, start := range []int64{1e15 + 7, 1<<53 - 4} {
		k := idem.Key{Scope: "tok", ID: strconv.FormatInt(start, 10)}
		req := idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(200 * 365 * 24 * time.Hour), NewToken: start}
		c, err := s.Claim(ctx, req)
		if err != nil || c.Record.Token != start {
			t.Fatalf("claim with NewToken %d: token %d, %v", start, c.Record.Token, err)
		}
		tok, refused := start, false
		for range 4 {
			if err := s.Release(ctx, idem.ReleaseRequest{Key: k, Token: tok, Now: now}); err != nil {
				t.Fatal(err)
			}
			c, err := s.Claim(ctx, req) // the claim script: tok + 1
			if tok+1 >= 1<<53 {
				if !errors.Is(err, idem.ErrInvalidData) {
					t.Fatalf("reclaim past 2^53 - 1: %v, %v; want ErrInvalidData", c.Outcome, err)
				}
				refused = true
				break
			}
			if err != nil || c.Record.Token != tok+1 {
				t.Fatalf("reclaim after %d = token %d, %v; want %d", tok, c.Record.Token, err, tok+1)
			}
			tok++
			v, _ := s.client.Get(ctx, keyOf(s.prefix, k)).Result()
			if want := "|" + strconv.FormatInt(tok, 10) + "|"; !strings.Contains(v, want) || strings.Contains(v, "e+") {
				t.Fatalf("stored value %q, want the token written as %s", v, want)
			}
		}
		if refused != (start > 1e15+7) {
			t.Fatalf("from %d: refused %v", start, refused)
		}
		// Refused after a release (settled: the retention's expiry), or
		// left in progress by the last reclaim (no expiry).
		if d := pttl(t, s, k); refused && !near(d, 200*365*24*time.Hour) || !refused && d != -1 {
			t.Fatalf("PTTL of a 200-year retention = %v (refused %v)", d, refused)
		}
	}
}
