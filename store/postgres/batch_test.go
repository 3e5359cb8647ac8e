package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storekit"
	"github.com/idemgo/idem/store/storetest"
)

func mixedKey(id string) idem.Key { return idem.Key{Scope: "mixed", ID: id} }

// mixedReq is a request for id at now. Its NewToken is derived from the id
// and the time, so that two stores given the same history (and the rules
// applied by hand) agree on every token, and a store that wrote any other
// token for a new row (a counter, a 1) is caught.
func mixedReq(id string, now time.Time, takeOver bool) idem.ClaimRequest {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s@%d", id, now.UnixNano())
	return idem.ClaimRequest{Key: mixedKey(id), Fingerprint: "fp-" + id, Now: now, LeaseUntil: now.Add(10 * time.Second),
		ExpiresAt: now.Add(time.Hour), TakeOverStale: takeOver, NewToken: 1<<32 + int64(h.Sum64()>>20)}
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

// MarkBatch over every kind of record answers as storekit.ApplyMark says, with
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
		w, _ := storekit.ApplyMark(cur, r)
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

// A poll whose requests share scope and times takes the statement that
// sends those once; any other batch sends every field per request. Both
// write the same records, and both tell new keys from existing ones.
func TestClaimBatchSharedFieldsWriteTheSameRecords(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	t0 := storetest.T0
	long := strings.Repeat("x", idem.MaxIDLen+1) // stored hashed, with a display id
	shared := []idem.ClaimRequest{mixedReq("s-1", t0, false), mixedReq("s-2", t0, false), mixedReq("s-3", t0, false)}
	perReq := []idem.ClaimRequest{mixedReq("p-1", t0, false), mixedReq("p-2", t0, false), mixedReq(long, t0, false)}
	for _, batch := range [][]idem.ClaimRequest{shared, perReq} {
		cs, err := s.ClaimBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cs {
			if c.Outcome != idem.ClaimAcquired || c.Record.Token != batch[i].NewToken {
				t.Fatalf("%s: %v token %d, want the request's %d", batch[i].Key.ID, c.Outcome, c.Record.Token, batch[i].NewToken)
			}
			if r, err := s.Get(ctx, batch[i].Key); err != nil || r.Token != c.Record.Token {
				t.Fatalf("%s: stored %+v, %v; want token %d", batch[i].Key.ID, r, err, c.Record.Token)
			}
		}
	}
	for i := range shared {
		a, err := s.Get(ctx, shared[i].Key)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Get(ctx, perReq[i].Key)
		if err != nil {
			t.Fatal(err)
		}
		a.ID, a.DisplayID, a.Fingerprint, a.Token = b.ID, b.DisplayID, b.Fingerprint, b.Token
		if !reflect.DeepEqual(a, b) {
			t.Errorf("shared path wrote %+v\nper-request path wrote %+v", a, b)
		}
	}
	if r, _ := s.Get(ctx, perReq[2].Key); r.DisplayID != long {
		t.Errorf("long id: display id %q", r.DisplayID)
	}
	// Again, with one new key among them: the shared statement inserts it
	// and leaves the rest to the full statement.
	again := append(shared[:2:2], mixedReq("s-4", t0, false))
	cs, err := s.ClaimBatch(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Outcome != idem.ClaimInProgress || cs[1].Outcome != idem.ClaimInProgress || cs[2].Outcome != idem.ClaimAcquired {
		t.Fatalf("second batch: %v %v %v", cs[0].Outcome, cs[1].Outcome, cs[2].Outcome)
	}
}

// Eight ClaimBatch calls over the same keys at once: the plain insert of
// all but one fails on the others' keys and falls back, and every key is
// acquired exactly once.
func TestClaimBatchOverlappingBatchesOneWinner(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	now := storetest.T0
	const workers, keys = 8, 50
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		won = map[string]int{}
	)
	for w := range workers {
		wg.Go(func() {
			reqs := make([]idem.ClaimRequest, keys)
			for i := range reqs {
				reqs[i] = mixedReq(strconv.Itoa((i+w*7)%keys), now, false) // each worker in its own order
			}
			cs, err := s.ClaimBatch(ctx, reqs)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, c := range cs {
				if c.Outcome == idem.ClaimAcquired {
					won[reqs[i].Key.ID]++
				}
			}
		})
	}
	wg.Wait()
	for i := range keys {
		if n := won[strconv.Itoa(i)]; n != 1 {
			t.Errorf("key %d acquired %d times", i, n)
		}
	}
	// A poll of new keys after the pause still claims them all.
	for b := range 40 {
		reqs := []idem.ClaimRequest{mixedReq("after-"+strconv.Itoa(b), now, false), mixedReq("after-x"+strconv.Itoa(b), now, false)}
		cs, err := s.ClaimBatch(ctx, reqs)
		if err != nil || cs[0].Outcome != idem.ClaimAcquired || cs[1].Outcome != idem.ClaimAcquired {
			t.Fatalf("batch %d after the pause: %v, %v", b, cs, err)
		}
	}
}
