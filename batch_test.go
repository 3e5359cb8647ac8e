package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// countingBatch counts ClaimBatch round trips.
type countingBatch struct {
	*memory.Store
	batches int
	reqs    []idem.ClaimRequest // of the last batch
}

func (c *countingBatch) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	c.batches++
	c.reqs = slices.Clone(reqs) // a store keeps nothing of them (storekit.BatchStore)
	return c.Store.ClaimBatch(ctx, reqs)
}

func (c *countingBatch) lastReqs() []idem.ClaimRequest { return c.reqs }

// A batch is claimed at one instant: the guard reads its clock once, so
// every request carries the same times (stores send shared values once).
func TestClaimBatchReadsTheClockOnce(t *testing.T) {
	s := &countingBatch{Store: memory.New()}
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := guard(t, s, idem.Options{Clock: func() time.Time { tick = tick.Add(time.Millisecond); return tick }})
	if _, err := g.ClaimBatch(context.Background(), []idem.Message{{ID: "a"}, {ID: "b"}, {ID: "c"}}); err != nil {
		t.Fatal(err)
	}
	reqs := s.lastReqs()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if reqs[0].Now.IsZero() {
		t.Fatal("the request has no time")
	}
	for _, r := range reqs[1:] {
		if !r.Now.Equal(reqs[0].Now) || !r.LeaseUntil.Equal(reqs[0].LeaseUntil) || !r.ExpiresAt.Equal(reqs[0].ExpiresAt) {
			t.Fatalf("request times differ: %+v vs %+v", r, reqs[0])
		}
	}
}

func TestClaimBatchTickets(t *testing.T) {
	s := &countingBatch{Store: memory.New()}
	g := guard(t, s, idem.Options{})
	ctx := context.Background()
	if _, err := g.Do(ctx, idem.Message{ID: "done", Payload: []byte("p")}, ok("old result")); err != nil {
		t.Fatal(err)
	}
	msgs := []idem.Message{
		{ID: "a", Payload: []byte("p")},
		{ID: "done", Payload: []byte("p")},
		{Payload: []byte("no key")},
		{ID: "a", Payload: []byte("p")}, // a producer retry inside one poll
		{ID: "done", Payload: []byte("other")},
		{ID: "b", Payload: []byte("p")},
	}
	tickets, err := g.ClaimBatch(ctx, msgs)
	if err != nil || len(tickets) != len(msgs) || s.batches != 1 {
		t.Fatalf("ClaimBatch = %d tickets, %v, %d round trips", len(tickets), err, s.batches)
	}
	runs := map[string]int{}
	h := func(ctx context.Context) ([]byte, error) {
		k, _ := idem.KeyFromContext(ctx)
		runs[k.ID]++
		return []byte("r-" + k.ID), nil
	}
	want := []struct {
		outcome idem.Outcome
		action  idem.Action
		value   string
	}{
		{idem.OutcomeProcessed, idem.ActionAck, "r-a"},
		{idem.OutcomeDuplicate, idem.ActionAck, "old result"},
		{idem.OutcomeNoKey, idem.ActionDeadLetter, ""},
		{idem.OutcomeDuplicate, idem.ActionAck, "r-a"},
		{idem.OutcomeConflict, idem.ActionDeadLetter, ""},
	}
	for i, w := range want {
		res, err := tickets[i].Do(ctx, h)
		if res.Outcome != w.outcome || idem.Decide(res, err) != w.action || (w.value != "" && string(res.Value) != w.value) {
			t.Fatalf("ticket %d: %v %q %v", i, res.Outcome, res.Value, err)
		}
	}
	if runs["a"] != 1 || runs["done"] != 0 {
		t.Fatalf("handler runs %v", runs)
	}
	if _, err := tickets[0].Do(ctx, h); !errors.Is(err, idem.ErrTicketUsed) {
		t.Fatalf("second Do = %v", err)
	}
	// The consumer stops before b's turn: b is given back at once.
	if err := tickets[5].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(ctx, idem.Key{Scope: "test", ID: "b"}); r.State != idem.StateReleased {
		t.Fatalf("released ticket left %s", r.State)
	}
	if res, err := g.Do(ctx, idem.Message{ID: "b", Payload: []byte("p")}, h); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("redelivery of a released ticket: %v %v", res.Outcome, err)
	}
}

func TestTicketRenewsOrLosesItsLease(t *testing.T) {
	clk := newClock()
	s := memory.New()
	g := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute})
	ctx := context.Background()
	tickets, err := g.ClaimBatch(ctx, []idem.Message{{ID: "slow", Payload: []byte("p")}, {ID: "late", Payload: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	// "slow" waits 50s for its turn: Do renews before running, so another
	// consumer at 70s still sees it in progress.
	clk.Advance(50 * time.Second)
	res, err := tickets[0].Do(ctx, func(ctx context.Context) ([]byte, error) {
		clk.Advance(20 * time.Second)
		if r, err := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Minute}).Do(ctx, idem.Message{ID: "slow", Payload: []byte("p")}, ok("x")); !errors.Is(err, idem.ErrInProgress) {
			return nil, errors.New("the waiting ticket's lease was not renewed: " + r.Outcome.String())
		}
		return nil, nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("slow ticket: %v %v", res.Outcome, err)
	}
	// "late" waited past its lease and another consumer took it over.
	clk.Advance(time.Minute)
	if _, err := guard(t, s, idem.Options{Clock: clk.Now, Lease: time.Hour, Stale: idem.StaleRetake}).Do(ctx, idem.Message{ID: "late", Payload: []byte("p")}, ok("other owner")); err != nil {
		t.Fatal(err)
	}
	res, err = tickets[1].Do(ctx, func(context.Context) ([]byte, error) {
		t.Fatal("handler ran on a lost lease")
		return nil, nil
	})
	if !errors.Is(err, idem.ErrLeaseLost) || res.Outcome != idem.OutcomeLeaseLost || idem.Decide(res, err) != idem.ActionRetry {
		t.Fatalf("late ticket: %v %v", res.Outcome, err)
	}
}

// A batch's message keeps its payload as Guard.Do's does
// (Options.KeepPayload): the claim a ticket ran, and a key that repeats an
// earlier message of the batch with other content, which the operator
// then finds beside its conflict.
func TestTicketKeepsPayload(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	g, err := idem.New(s, idem.Options{Scope: "billing", KeepPayload: 4})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []idem.Message{
		{ID: "a", Payload: []byte("first")},
		{ID: "b", Payload: []byte("ok")},
		{ID: "a", Payload: []byte("other")}, // a repeat with other content: claimed when run
	}
	tickets, err := g.ClaimBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range tickets {
		res, err := tk.Do(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		want := idem.OutcomeProcessed
		if i == 2 {
			want = idem.OutcomeConflict
		}
		if res.Outcome != want {
			t.Fatalf("ticket %d: %v, %v; want %v", i, res.Outcome, err, want)
		}
	}
	for _, c := range []struct {
		m         idem.Message
		want      string
		truncated bool
	}{{msgs[0], "firs", true}, {msgs[1], "ok", false}} {
		k, _ := g.Key(c.m)
		fp, _ := g.Fingerprint(c.m)
		got, cut, err := idem.KeptPayload(ctx, s, k, fp)
		if err != nil || string(got) != c.want || cut != c.truncated {
			t.Errorf("kept payload of %s: %q, %v, %v; want %q, %v", c.m.ID, got, cut, err, c.want, c.truncated)
		}
	}
}

// Batch claims from many goroutines at once, as a consumer's partitions
// make them, each batch of a different size (the guard keeps a batch's
// requests for the next one): every ticket answers for its own message,
// and each key is processed once.
func TestClaimBatchConcurrent(t *testing.T) {
	g := guard(t, memory.New(), idem.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(ctx context.Context) ([]byte, error) {
		k, _ := idem.KeyFromContext(ctx)
		mu.Lock()
		runs[k.ID]++
		mu.Unlock()
		return nil, nil
	}
	const workers, batches = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range batches {
				var msgs []idem.Message
				for i := range 1 + (w*7+b*3)%60 {
					// Half of the ids are shared by every worker.
					id := fmt.Sprintf("w%d-b%d-%d", w, b, i)
					if i%2 == 0 {
						id = fmt.Sprintf("shared-b%d-%d", b, i)
					}
					msgs = append(msgs, idem.Message{ID: id, Payload: []byte(id)})
				}
				tickets, err := g.ClaimBatch(ctx, msgs)
				if err != nil || len(tickets) != len(msgs) {
					t.Errorf("ClaimBatch = %d tickets, %v", len(tickets), err)
					return
				}
				for i, tk := range tickets {
					if tk.Key().ID != msgs[i].ID {
						t.Errorf("ticket %d answers for %q, its message is %q", i, tk.Key().ID, msgs[i].ID)
						return
					}
					res, err := tk.Do(ctx, h)
					switch {
					case res.Key.ID != msgs[i].ID:
						t.Errorf("ticket %d ran %q, its message is %q", i, res.Key.ID, msgs[i].ID)
					case err != nil && !errors.Is(err, idem.ErrInProgress):
						t.Errorf("ticket %q: %v %v", msgs[i].ID, res.Outcome, err)
					}
				}
			}
		})
	}
	wg.Wait()
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("%s processed %d times", id, n)
		}
	}
	if len(runs) == 0 {
		t.Fatal("nothing processed")
	}
}
