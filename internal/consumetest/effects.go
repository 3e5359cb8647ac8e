package consumetest

import (
	"maps"
	"sync"
	"testing"
)

// Effects counts a handler's business side effect: how many times each id
// was applied. The zero value is ready; it is safe for concurrent use.
type Effects struct {
	mu sync.Mutex
	n  map[string]int
}

// Add records one application of id.
func (e *Effects) Add(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[id]++
}

// Snapshot returns the counts so far.
func (e *Effects) Snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.n)
}

// AppliedOnce fails t unless got holds exactly unique ids, each applied
// once; verb says what a count means in the messages ("applied",
// "committed").
func AppliedOnce(t testing.TB, verb string, got map[string]int, unique int) {
	t.Helper()
	if len(got) != unique {
		t.Errorf("%d orders %s, want %d", len(got), verb, unique)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("order %s %s %d times", id, verb, n)
		}
	}
}
