// Package countdown keeps a store on another path for its next n calls
// after an event: the PostgreSQL store's ClaimBatch skips its plain insert
// for a while after one met an existing key, its DoTx markers go ahead of
// the handler for a while after a deferred one met a recorded key, and the
// Redis store's Claim reads existing keys in its SET for a while after
// meeting one.
package countdown

import "sync/atomic"

// Countdown is zero (inactive) until Start. It is safe for concurrent use.
type Countdown struct{ left atomic.Int64 }

// Start makes the next n calls of Active report true.
func (c *Countdown) Start(n int64) { c.left.Store(n) }

// Active reports whether calls are left since the last Start, and counts
// this one. Concurrent callers may together take a few more than n: the
// count is a hint for choosing a path, never a limit.
func (c *Countdown) Active() bool {
	if c.left.Load() <= 0 {
		return false
	}
	c.left.Add(-1)
	return true
}
