package console

import (
	"context"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// counts serves Inspector.Stats from a snapshot. Every store's Stats reads
// all its records (a sequential scan, a SCAN of every key), so a page must
// not run it per view: a console left open on a 100M-row table, or a
// dashboard polling it, would keep the database busy scanning. A snapshot
// younger than maxAge is served as is; an older one is served while one
// recount runs in the background; only the first view waits.
type counts struct {
	in      idem.Inspector
	maxAge  time.Duration // < 0: count on every view
	timeout time.Duration
	clock   func() time.Time
	base    context.Context // ends with Console.Close
	wg      sync.WaitGroup

	mu      sync.Mutex
	snap    *snapshot
	running chan struct{} // closed when the running recount ends; nil when none runs
}

// snapshot is one Stats call's answer.
type snapshot struct {
	Stats []idem.ScopeStats
	At    time.Time     // the time the records were counted at
	Took  time.Duration // how long Stats ran
	Err   error
}

func (c *counts) get(ctx context.Context) snapshot {
	if c.maxAge < 0 {
		return c.count(ctx)
	}
	c.mu.Lock()
	if c.base.Err() != nil { // closed: no more background work
		c.mu.Unlock()
		return c.count(ctx)
	}
	snap, running := c.snap, c.running
	if snap != nil && c.clock().Sub(snap.At) < c.maxAge && snap.Err == nil {
		c.mu.Unlock()
		return *snap
	}
	if running == nil {
		running = make(chan struct{})
		c.running = running
		c.wg.Add(1)
		go c.recount(running)
	}
	c.mu.Unlock()
	if snap != nil && snap.Err == nil {
		return *snap // old, and marked so on the page; the recount replaces it
	}
	select {
	case <-running:
	case <-ctx.Done():
		return snapshot{At: c.clock(), Err: ctx.Err()}
	}
	c.mu.Lock()
	snap = c.snap
	c.mu.Unlock()
	if snap == nil { // forgotten by an action meanwhile
		return c.count(ctx)
	}
	return *snap
}

// recount runs one Stats call on the console's context, so Close ends it.
func (c *counts) recount(done chan struct{}) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	s := c.count(ctx)
	c.mu.Lock()
	c.snap, c.running = &s, nil
	c.mu.Unlock()
	close(done)
}

func (c *counts) count(ctx context.Context) snapshot {
	now := c.clock()
	start := time.Now()
	st, err := c.in.Stats(ctx, now)
	return snapshot{Stats: st, At: now, Took: time.Since(start), Err: err}
}

// forget drops the snapshot after an action changed the records, so the next
// view counts again.
func (c *counts) forget() {
	c.mu.Lock()
	c.snap = nil
	c.mu.Unlock()
}
