package idem

import (
	"context"
	"sync"
)

// Counter is an Observer that counts events by outcome. It is safe for
// concurrent use; the demo and tests read it.
type Counter struct {
	mu     sync.Mutex
	counts map[Outcome]int64
}

// Observe counts e.
func (c *Counter) Observe(_ context.Context, e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[Outcome]int64)
	}
	c.counts[e.Outcome]++
}

// Count returns how many events had outcome o.
func (c *Counter) Count(o Outcome) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[o]
}

// Counts returns a snapshot of all counts keyed by outcome name.
func (c *Counter) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.counts))
	for o, n := range c.counts {
		out[o.String()] = n
	}
	return out
}
