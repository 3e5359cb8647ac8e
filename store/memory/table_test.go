package memory

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storetest"
)

var ctx = context.Background()

func claimReq(id, fp string) idem.ClaimRequest {
	return idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: id}, Fingerprint: fp, Now: storetest.T0,
		LeaseUntil: storetest.T0.Add(time.Second), ExpiresAt: storetest.T0.Add(time.Hour)}
}

// settle claims and completes id with fp and result res.
func settle(t *testing.T, s *Store, id, fp, res string) {
	t.Helper()
	c, err := s.Claim(ctx, claimReq(id, fp))
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("Claim %s = %v, %v", id, c.Outcome, err)
	}
	if err := s.Complete(ctx, idem.CompleteRequest{Key: c.Record.Key(), Token: c.Record.Token, Result: []byte(res),
		Now: storetest.T0, ExpiresAt: storetest.T0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// check fails unless id is held completed with fp and res.
func check(t *testing.T, s *Store, id, fp, res string) {
	t.Helper()
	r, err := s.Get(ctx, idem.Key{Scope: "s", ID: id})
	if err != nil || r.ID != id || r.Fingerprint != fp || string(r.Result) != res || r.State != idem.StateCompleted {
		t.Fatalf("Get %s = %+v, %v; want fingerprint %q, result %q", id, r, err, fp, res)
	}
}

// verify fails unless the index holds every live slot exactly once, each
// under its slot's hash, and a probe from that hash's place reaches it.
func verify(t *testing.T, s *Store) {
	t.Helper()
	tb := s.t
	x := &tb.index
	entries := 0
	for _, e := range x.e {
		if e == 0 {
			continue
		}
		entries++
		h, i := uint32(e>>32), int32(uint32(e))-1
		if sl := tb.at(i); sl.state == 0 || sl.hash != h {
			t.Fatalf("entry of hash %x is slot %d: %+v", h, i, *sl)
		}
		if !probes(x, e) {
			t.Fatalf("entry of slot %d is not reached from its hash's place", i)
		}
	}
	if entries != tb.live || x.n != tb.live {
		t.Fatalf("the index holds %d entries (counts %d) of %d live slots", entries, x.n, tb.live)
	}
}

// probes reports whether a probe from e's hash's place reaches e before
// an empty entry.
func probes(x *index, e uint64) bool {
	for p := uint32(e>>32) & x.mask; x.e[p] != 0; p = (p + 1) & x.mask {
		if x.e[p] == e {
			return true
		}
	}
	return false
}

// The index under churn, on a few hashes so that runs of entries are long
// and wrap around its end: every entry added and not removed is reached
// from its hash's place, every removed one is gone, the rest moved back.
func TestIndexChurn(t *testing.T) {
	var x index
	live := map[int32]uint32{} // slot -> hash
	next := int32(0)
	rnd := uint32(1)
	rand := func(n uint32) uint32 { rnd = rnd*1664525 + 1013904223; return (rnd >> 8) % n }
	for step := range 20000 {
		if len(live) > 0 && (rand(3) == 0 || len(live) > 700) {
			for i, h := range live { // a random one: map order
				x.remove(h, i)
				delete(live, i)
				break
			}
		} else {
			// Hashes in the index's last places and a few others: long
			// runs that wrap around.
			h := uint32(indexMin-1-rand(8)) | rand(4)<<20
			x.add(h, next)
			live[next] = h
			next++
		}
		if step%97 == 0 || step > 19900 {
			n := 0
			for _, e := range x.e {
				if e != 0 {
					n++
				}
			}
			if n != len(live) || x.n != len(live) {
				t.Fatalf("step %d: %d entries (counts %d), want %d", step, n, x.n, len(live))
			}
			for i, h := range live {
				if !probes(&x, indexEntry(h, i)) {
					t.Fatalf("step %d: slot %d of hash %x not reached", step, i, h)
				}
			}
		}
	}
}

// Two keys whose hashes are equal have an entry each: each is found, and
// each survives the other's removal, whichever was put first.
func TestHashCollisions(t *testing.T) {
	s := New()
	sc, _ := s.t.scope("s", true)
	seen := map[uint32]string{}
	var a, b string
	for i := 0; b == ""; i++ {
		id := fmt.Sprint("k", i)
		h := s.t.hash(sc, id)
		if other, ok := seen[h]; ok {
			a, b = other, id
		}
		seen[h] = id
	}
	seed := s.t.seed
	for _, sweep := range []string{a, b} {
		t.Run("sweep "+sweep, func(t *testing.T) {
			s := New()
			s.t.seed = seed
			if sc, _ := s.t.scope("s", true); s.t.hash(sc, a) != s.t.hash(sc, b) {
				t.Fatal("the keys do not collide")
			}
			settle(t, s, a, "fa", "ra")
			settle(t, s, b, "fb", "rb")
			check(t, s, a, "fa", "ra")
			check(t, s, b, "fb", "rb")
			verify(t, s)
			// Retain one of them beyond the sweep's time: the other goes.
			keep := map[string]string{a: b, b: a}[sweep]
			r, _ := s.Get(ctx, idem.Key{Scope: "s", ID: keep})
			if err := s.Retain(ctx, idem.RetainRequest{Key: r.Key(), Token: r.Token, Now: storetest.T0,
				ExpiresAt: storetest.T0.Add(3 * time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Sweep(ctx, idem.SweepRequest{Now: storetest.T0.Add(2 * time.Hour), Limit: 10}); n != 1 || err != nil {
				t.Fatalf("Sweep = %d, %v; want 1", n, err)
			}
			if _, err := s.Get(ctx, idem.Key{Scope: "s", ID: sweep}); err != idem.ErrNotFound {
				t.Fatalf("Get of the swept key = %v", err)
			}
			verify(t, s)
			check(t, s, keep, map[string]string{a: "fa", b: "fb"}[keep], map[string]string{a: "ra", b: "rb"}[keep])
			// The swept key's place is taken by a new claim of it.
			settle(t, s, sweep, "fn", "rn")
			check(t, s, sweep, "fn", "rn")
			verify(t, s)
		})
	}
}

// Sweeping most records leaves their text dead; the store copies the rest
// into new pages, and every record left reads as it was written.
func TestCompaction(t *testing.T) {
	s := New()
	const n = 2000
	fp := func(i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("f", 200) }
	for i := range n {
		settle(t, s, fmt.Sprint("k", i), fp(i), fmt.Sprint("r", i))
	}
	// Every tenth record outlives the sweep.
	for i := 0; i < n; i += 10 {
		r, _ := s.Get(ctx, idem.Key{Scope: "s", ID: fmt.Sprint("k", i)})
		if err := s.Retain(ctx, idem.RetainRequest{Key: r.Key(), Token: r.Token, Now: storetest.T0,
			ExpiresAt: storetest.T0.Add(3 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	pages := len(s.t.pages)
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: storetest.T0.Add(2 * time.Hour), Limit: n}); n != 1800 || err != nil {
		t.Fatalf("Sweep = %d, %v; want 1800", n, err)
	}
	if len(s.t.pages) >= pages || s.t.dead > s.t.used/2 {
		t.Fatalf("%d pages (%d before), %d of %d bytes dead: not compacted", len(s.t.pages), pages, s.t.dead, s.t.used)
	}
	for i := 0; i < n; i += 10 {
		check(t, s, fmt.Sprint("k", i), fp(i), fmt.Sprint("r", i))
	}
	verify(t, s)
	if got := s.Len(); got != 200 {
		t.Fatalf("Len = %d; want 200", got)
	}
}

// A long id is stored as its digest with the original for display; both
// read back, and the record's times keep their location.
func TestLongIDAndTimes(t *testing.T) {
	s := New()
	long := strings.Repeat("x", idem.MaxIDLen+10)
	req := claimReq(long, "fp")
	loc := time.FixedZone("here", 3600)
	req.Now, req.LeaseUntil, req.ExpiresAt = req.Now.In(loc), req.LeaseUntil.In(loc), req.ExpiresAt.In(loc)
	if _, err := s.Claim(ctx, req); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(ctx, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != req.Key.StoredID() || r.DisplayID != req.Key.DisplayID() || r.ID == r.DisplayID {
		t.Fatalf("ids %q, %q; want %q, %q", r.ID, r.DisplayID, req.Key.StoredID(), req.Key.DisplayID())
	}
	if r.CreatedAt != req.Now.Round(0) || r.LeaseUntil != req.LeaseUntil.Round(0) || r.CreatedAt.Location() != loc {
		t.Fatalf("times %v, %v; want %v, %v", r.CreatedAt, r.LeaseUntil, req.Now, req.LeaseUntil)
	}
}
