package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

func mixedKey(id string) idem.Key { return idem.Key{Scope: "mixed", ID: id} }

func mixedReq(id string, now time.Time, takeOver bool) idem.ClaimRequest {
	return idem.ClaimRequest{Key: mixedKey(id), Fingerprint: "fp-" + id, Now: now, LeaseUntil: now.Add(10 * time.Second),
		ExpiresAt: now.Add(time.Hour), TakeOverStale: takeOver}
}

// mixedHistory gives each store one record of every kind: stale in
// progress (twice), live, completed, released, expired.
func mixedHistory(t *testing.T, stores ...idem.Store) {
	t.Helper()
	ctx := context.Background()
	t0 := storetest.T0
	k, req := mixedKey, mixedReq
	for _, st := range stores {
		for _, id := range []string{"stale-take", "stale-keep", "live", "done", "released", "expired"} {
			c, err := st.Claim(ctx, req(id, t0, true))
			if err != nil {
				t.Fatal(err)
			}
			switch id {
			case "done":
				err = st.Complete(ctx, idem.CompleteRequest{Key: k(id), Token: c.Record.Token, Result: []byte("r"), Now: t0, ExpiresAt: t0.Add(time.Hour)})
			case "released":
				err = st.Release(ctx, idem.ReleaseRequest{Key: k(id), Token: c.Record.Token, Now: t0})
			case "expired":
				err = st.Complete(ctx, idem.CompleteRequest{Key: k(id), Token: c.Record.Token, Now: t0, ExpiresAt: t0.Add(time.Minute)})
			case "live":
				err = st.Renew(ctx, idem.RenewRequest{Key: k(id), Token: c.Record.Token, Now: t0, LeaseUntil: t0.Add(time.Hour)})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// One batch meets every kind of existing record, with per-request times and
// take-over flags, and answers exactly as the reference store does.
func TestClaimBatchMatchesReference(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ref := memory.New()
	ctx := context.Background()
	t0 := storetest.T0
	req := mixedReq
	mixedHistory(t, s, ref)
	later := t0.Add(2 * time.Minute)
	batch := []idem.ClaimRequest{
		req("stale-take", later, true),
		req("stale-keep", later, false),
		req("live", later, true),
		req("done", later, true),
		req("released", later.Add(time.Second), false),
		req("expired", later, false),
		req("new", later, false),
	}
	got, err := s.ClaimBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.ClaimBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		g, w := got[i], want[i]
		if g.Outcome != w.Outcome || g.Retaken != w.Retaken || g.Record.Token != w.Record.Token ||
			g.Record.Attempts != w.Record.Attempts || g.Record.State != w.Record.State ||
			g.Record.Fingerprint != w.Record.Fingerprint || string(g.Record.Result) != string(w.Record.Result) ||
			!g.Record.LeaseUntil.Equal(w.Record.LeaseUntil) || !g.Record.ExpiresAt.Equal(w.Record.ExpiresAt) ||
			!g.Record.CreatedAt.Equal(w.Record.CreatedAt) {
			t.Errorf("%s: got %v retaken=%v %+v\nwant %v retaken=%v %+v", batch[i].Key.ID, g.Outcome, g.Retaken, g.Record, w.Outcome, w.Retaken, w.Record)
		}
	}
	// Invalid input is rejected before anything is sent.
	if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{req("a", t0, false), req("a", t0, false)}); !errors.Is(err, postgres.ErrDuplicateKeyInBatch) {
		t.Fatalf("repeated key: %v", err)
	}
	bad := req("b", t0, false)
	bad.Key.Scope = ""
	if _, err := s.ClaimBatch(ctx, []idem.ClaimRequest{bad}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("empty scope: %v", err)
	}
	if cs, err := s.ClaimBatch(ctx, nil); err != nil || len(cs) != 0 {
		t.Fatalf("empty batch: %v %v", cs, err)
	}
}

// MarkBatch over every kind of record answers as idem.ApplyMark says, with
// new and existing keys mixed (the fast insert and the full statement).
func TestMarkBatchMatchesRules(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ref := memory.New()
	ctx := context.Background()
	mixedHistory(t, s, ref)
	later := storetest.T0.Add(2 * time.Minute)
	var batch []idem.ClaimRequest
	for _, id := range []string{"new-1", "stale-take", "stale-keep", "live", "done", "released", "expired", "new-2"} {
		batch = append(batch, mixedReq(id, later, true))
	}
	var got []idem.Claim
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		got, err = s.MarkBatch(ctx, tx, batch)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range batch {
		var cur *idem.Record
		if rec, err := ref.Get(ctx, r.Key); err == nil {
			cur = &rec
		}
		w, _ := idem.ApplyMark(cur, r)
		g := got[i]
		if g.Outcome != w.Outcome || g.Record.Token != w.Record.Token || g.Record.Attempts != w.Record.Attempts ||
			g.Record.State != w.Record.State || g.Record.Fingerprint != w.Record.Fingerprint {
			t.Errorf("%s: got %v %+v\nwant %v %+v", r.Key.ID, g.Outcome, g.Record, w.Outcome, w.Record)
		}
		if g.Outcome == idem.ClaimAcquired {
			if rec, err := s.Get(ctx, r.Key); err != nil || rec.State != idem.StateCompleted || rec.Token != g.Record.Token {
				t.Errorf("%s: committed marker %+v, %v", r.Key.ID, rec, err)
			}
		}
	}
}
