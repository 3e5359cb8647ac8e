//go:build !race

package idem_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// The guard's allocations per message are counted and cut (issues 27
// and 39): Guard.Do of a new key on the memory store with an empty handler
// makes one run (its claim's, its handler's and its completion's contexts)
// and the fingerprint, and no timer; the memory store makes its records in
// blocks. A change that adds one says so here (BenchmarkDo measures what
// it costs).
func TestDoAllocations(t *testing.T) {
	const most = 2
	g := guard(t, memory.New(), idem.Options{})
	ctx := context.Background()
	h := func(context.Context) ([]byte, error) { return nil, nil }
	ids := make([]string, 1001)
	for i := range ids {
		ids[i] = "m-" + strconv.Itoa(i)
	}
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		if _, err := g.Do(ctx, idem.Message{ID: ids[i], Payload: benchPayload}, h); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if n > most {
		t.Fatalf("Do allocates %v times per message, at most %d before", n, most)
	}
}

// A batch's messages cost what Guard.Do's do: ClaimBatch of 100 messages
// and Ticket.Do of each allocate the two of each run, and for the batch
// its tickets, its requests and the store's answers, a few allocations
// shared by the 100.
func TestTicketDoAllocations(t *testing.T) {
	const (
		batch = 100
		most  = 2.2 // per message (2.10 when written)
	)
	g := guard(t, memory.New(), idem.Options{})
	ctx := context.Background()
	h := func(context.Context) ([]byte, error) { return nil, nil }
	const runs = 20
	ids := make([]string, (runs+1)*batch) // AllocsPerRun runs once more first
	for i := range ids {
		ids[i] = "m-" + strconv.Itoa(i)
	}
	msgs := make([]idem.Message, batch)
	round := 0
	n := testing.AllocsPerRun(runs, func() {
		for i := range msgs {
			msgs[i] = idem.Message{ID: ids[round*batch+i], Payload: benchPayload}
		}
		round++
		tickets, err := g.ClaimBatch(ctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tickets {
			if res, err := tk.Do(ctx, h); err != nil || res.Outcome != idem.OutcomeProcessed {
				t.Fatal(res.Outcome, err)
			}
		}
	}) / batch
	t.Logf("%.2f allocations per message", n)
	if n > most {
		t.Fatalf("ClaimBatch and Ticket.Do allocate %.2f times per message, at most %v before", n, most)
	}
}
