package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// fill claims n keys named prefix-i in batches, expiring at exp, and
// releases them (only settled records expire; one UPDATE, not n releases).
func fill(t testing.TB, s *postgres.Store, prefix string, n int, now, exp time.Time) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		var reqs []idem.ClaimRequest
		for i := start; i < min(n, start+1000); i++ {
			reqs = append(reqs, idem.ClaimRequest{Key: idem.Key{Scope: "sweep", ID: fmt.Sprintf("%s-%07d", prefix, i)},
				Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: exp})
		}
		if _, err := s.ClaimBatch(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testPool(t).Exec(context.Background(), `UPDATE `+s.Table()+` SET state = 3 WHERE scope = 'sweep' AND id LIKE $1`,
		prefix+"-%"); err != nil {
		t.Fatal(err)
	}
}

// 20k expired rows go in batches of at most 1000; 500 live rows stay.
func TestSweepBatches(t *testing.T) {
	for _, opts := range []postgres.Options{{}, {Partitions: 4}} {
		t.Run(fmt.Sprintf("partitions=%d", opts.Partitions), func(t *testing.T) {
			s := newStore(t, opts)
			t0 := storetest.T0
			fill(t, s, "old", 20000, t0, t0.Add(time.Hour))
			fill(t, s, "live", 500, t0, t0.Add(48*time.Hour))
			now := t0.Add(2 * time.Hour)
			batches := 0
			sw := &idem.Sweeper{Store: countingStore{s, &batches}, BatchSize: 1000, Clock: func() time.Time { return now }}
			n, err := sw.SweepOnce(context.Background())
			if err != nil || n != 20000 {
				t.Fatalf("SweepOnce = %d, %v; want 20000", n, err)
			}
			if batches < 20 {
				t.Fatalf("%d sweep calls for 20000 rows with batches of 1000", batches)
			}
			var left int
			if err := testPool(t).QueryRow(context.Background(), `SELECT count(*) FROM `+s.Table()).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 500 {
				t.Fatalf("%d rows left, want the 500 live ones", left)
			}
		})
	}
}

type countingStore struct {
	*postgres.Store
	n *int
}

func (c countingStore) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	*c.n++
	n, err := c.Store.Sweep(ctx, req)
	if n > req.Limit {
		return n, fmt.Errorf("swept %d rows with limit %d", n, req.Limit)
	}
	return n, err
}

// A claim holding an expired row does not stop the sweep: the row is skipped
// (SKIP LOCKED) and the others go. Then a revived row survives the sweep.
func TestSweepSkipsLockedRows(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	t0 := storetest.T0
	fill(t, s, "old", 10, t0, t0.Add(time.Hour))
	now := t0.Add(2 * time.Hour)
	tx, err := testPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT FROM `+s.Table()+` WHERE scope = 'sweep' AND id = 'old-0000000' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// A deadline only turns a hang (the bug) into a failure.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := s.Sweep(sctx, idem.SweepRequest{Now: now, Limit: 100})
	if err != nil || n != 9 {
		t.Fatalf("Sweep beside a locked row = %d, %v; want 9", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Revive the row with a claim: it is no longer expired and stays.
	k := idem.Key{Scope: "sweep", ID: "old-0000000"}
	c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("reclaim of the expired row = %v, %v", c.Outcome, err)
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 100}); err != nil || n != 0 {
		t.Fatalf("Sweep after the revival = %d, %v; want 0", n, err)
	}
	if _, err := s.Get(ctx, k); err != nil {
		t.Fatalf("revived row: %v", err)
	}
}

// Rows are swept as soon as they expire, never before: sweep_at (the
// indexed column) is at most expires_at on every row, also after a
// complete or a renewal moved expires_at past it.
func TestSweepNeverEarly(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	t0 := storetest.T0
	exp := t0.Add(time.Hour + 30*time.Second + 250*time.Millisecond)
	fill(t, s, "edge", 3, t0, exp)
	// A fourth row completed 40s after its claim and a fifth renewed 50s
	// past its retention: both keep their claim's sweep_at (HOT), and are
	// swept at their own expiry.
	moved := map[string]time.Duration{"completed": 40 * time.Second, "renewed": 50 * time.Second}
	for id, by := range moved {
		k := idem.Key{Scope: "sweep", ID: id}
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Now: t0, LeaseUntil: t0.Add(time.Second), ExpiresAt: exp})
		if err != nil {
			t.Fatal(err)
		}
		if id == "completed" {
			err = s.Complete(ctx, idem.CompleteRequest{Key: k, Token: c.Record.Token, Now: t0.Add(by), ExpiresAt: exp.Add(by)})
		} else if err = s.Renew(ctx, idem.RenewRequest{Key: k, Token: c.Record.Token, Now: exp, LeaseUntil: exp.Add(by)}); err == nil {
			// Released at once: settled, with the expiry the renewal carried.
			err = s.Release(ctx, idem.ReleaseRequest{Key: k, Token: c.Record.Token, Now: exp})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		now  time.Time
		want int
	}{
		{exp.Add(-time.Microsecond), 0},
		{exp, 3},
		{exp.Add(40*time.Second - time.Microsecond), 0},
		{exp.Add(40 * time.Second), 1},
		{exp.Add(50*time.Second - time.Microsecond), 0}, // released, its expiry carried by the renewal
		{exp.Add(50 * time.Second), 1},
	} {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: tc.now, Limit: 10})
		if err != nil || n != tc.want {
			t.Fatalf("Sweep at %v = %d, %v; want %d", tc.now.Sub(exp), n, err, tc.want)
		}
	}
}

// Sweep with a Limit of zero or less deletes nothing (the contract says at
// most Limit; this store used to take 1000).
func TestSweepLimitNotPositive(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	t0 := storetest.T0
	fill(t, s, "old", 5, t0, t0.Add(time.Hour))
	now := t0.Add(2 * time.Hour)
	for _, limit := range []int{0, -1, -1000} {
		if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: limit}); err != nil || n != 0 {
			t.Fatalf("Sweep(Limit %d) = %d, %v; want 0, nil", limit, n, err)
		}
	}
	if n, err := s.Sweep(ctx, idem.SweepRequest{Now: now, Limit: 5}); err != nil || n != 5 {
		t.Fatalf("Sweep(Limit 5) = %d, %v; want 5", n, err)
	}
}
