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
