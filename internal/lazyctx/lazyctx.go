// Package lazyctx is a context for one step of per-message work (a broker
// action, a handler's run) whose standard machinery is made only when
// something needs it: the consumer engine makes one or two per message,
// where context.WithTimeout and context.WithCancelCause cost two to five
// allocations each.
package lazyctx

import (
	"context"
	"sync"
	"time"
)

// Ctx is a context whose machinery is made lazily: what
// context.WithCancelCause, context.WithDeadline or either over
// context.WithoutCancel would be, except that theirs (a cancelCtx, its
// done channel, an entry in the parent's children, a timer; two to five
// allocations) is made only when something asks for Done, a detached
// context's value is read, or it is cancelled with a cause. Code that
// reads Err at most (a store that checks it, a client call that takes no
// context, a handler that returns without blocking) costs nothing but the
// struct. Once made, the inner context answers everything, so
// context.Cause, context.AfterFunc and derived contexts behave as they do
// on the standard ones. Set it up with Init before any use; the zero Ctx
// is not a context.
type Ctx struct {
	parent   context.Context
	deadline time.Time // zero: none of its own (yet, with a timeout)
	// timeout, when not zero, sets deadline the first time it is needed
	// (InitTimeout).
	timeout time.Duration
	// detach: parent's cancellation and deadline do not apply; parent
	// becomes context.WithoutCancel(parent) when first needed.
	detach bool

	mu    sync.Mutex
	inner context.Context         // made by Done, an Err past the end, or a cancel with a cause
	stop  context.CancelCauseFunc // inner's cancel
	ended bool                    // cancelled before inner was made: Err is Canceled
}

// Init sets c up as a context derived from parent, ending at deadline
// when it is not zero; detached, parent's cancellation and deadline do not
// apply to it (its values do). Cancel it when done with it.
func (c *Ctx) Init(parent context.Context, deadline time.Time, detach bool) {
	c.parent, c.deadline, c.detach = parent, deadline, detach
}

// InitTimeout is Init for a context that ends timeout after it is first
// asked about: its deadline is set, from one reading of the clock, the
// first time anything reads it, reads Err, waits on Done or reads a
// value. A step that asks nothing of its context (an ack that takes
// none, a client call that returns without blocking) costs no reading of
// the clock, which is as costly as the rest of a broker action on some
// machines. A step that blocks on its context asks as it starts, so it is
// bounded as it would be by context.WithTimeout made before it.
func (c *Ctx) InitTimeout(parent context.Context, timeout time.Duration, detach bool) {
	c.parent, c.timeout, c.detach = parent, timeout, detach
}

// due sets the deadline of a context made with InitTimeout, the first time
// it is needed, and reports whether it did (it is then in the future).
// Called with mu held.
func (c *Ctx) due() bool {
	if c.timeout > 0 && c.deadline.IsZero() {
		c.deadline = time.Now().Add(c.timeout)
		return true
	}
	return false
}

// base returns the parent the context derives from. Called with mu held.
func (c *Ctx) base() context.Context {
	if c.detach {
		c.parent, c.detach = context.WithoutCancel(c.parent), false
	}
	return c.parent
}

// makeInner makes the context that answers from now on. Called with mu held.
func (c *Ctx) makeInner() {
	c.due()
	if c.deadline.IsZero() {
		c.inner, c.stop = context.WithCancelCause(c.base())
	} else {
		inner, stop := context.WithDeadline(c.base(), c.deadline)
		c.inner, c.stop = inner, func(error) { stop() }
	}
	if c.ended {
		c.stop(nil)
	}
}

// Deadline implements context.Context.
func (c *Ctx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	var (
		d  time.Time
		ok bool
	)
	if !c.detach {
		d, ok = c.parent.Deadline()
	}
	c.due()
	own := c.deadline
	c.mu.Unlock()
	if own.IsZero() || ok && d.Before(own) {
		return d, ok
	}
	return own, true
}

// Done implements context.Context.
func (c *Ctx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.makeInner()
	}
	return c.inner.Done()
}

// Err implements context.Context. Before anything waited on Done it reads
// the parent and the clock; a context past its end gets its inner one, so
// that Err, Done and Cause agree from then on.
func (c *Ctx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.inner != nil:
		return c.inner.Err()
	case c.ended:
		return context.Canceled
	case !c.detach && c.parent.Err() != nil:
		c.makeInner()
		return c.inner.Err()
	case c.due():
		// Its deadline was set just now: it is ahead.
	case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
		c.makeInner()
		return c.inner.Err()
	}
	return nil
}

// Value implements context.Context.
func (c *Ctx) Value(key any) any {
	c.mu.Lock()
	c.due()
	from := c.inner
	if from == nil {
		from = c.base()
	}
	c.mu.Unlock()
	return from.Value(key)
}

// Cancel ends the context, with cause when it is not nil (the reader
// finds it with context.Cause). Its cost is a lock unless something
// waited on Done or there is a cause.
func (c *Ctx) Cancel(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		if cause == nil {
			c.ended = true
			return
		}
		c.makeInner()
	}
	c.stop(cause)
}

// String names the context in a context's String, as the standard ones do.
func (c *Ctx) String() string { return "lazyctx.Ctx" }
