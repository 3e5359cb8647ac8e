package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is the context of one step of the guard's work: a store call
// bounded by StoreTimeout (Guard.storeCtx), or a handler's run under its
// lease (run). It is what context.WithTimeout or context.WithCancelCause
// over parent would be, except that their machinery (a cancelCtx, its done
// channel, an entry in the parent's children, a timer) is made only when
// something asks for Done, or the run is cancelled with a cause. The memory
// store, and a handler that returns without blocking, read Err at most:
// those per-message contexts and timers were the guard's largest cost per
// message (issue 27). Once made, the inner context answers everything, so
// context.Cause, context.AfterFunc and derived contexts behave as they do
// on the standard ones.
type callCtx struct {
	parent context.Context
	// deadline is the end, in nanoseconds after callEpoch (of its monotonic
	// clock: 8 bytes, where a time.Time is 24); 0: none (a handler's run, a
	// store in memory).
	deadline int64
	key      *Key     // answered to KeyFromContext when not nil (a handler's run: its run's key)
	made     *madeCtx // made by the first Done, Err past the end, or a cancel with a cause

	mu sync.Mutex // over made, parent once wrapped
	// state is callLive, callEnded or callMade. Err and cancel read and
	// set it without mu while nothing waits (callLive, callEnded): a store
	// call asks Err, and the guard cancels, once or twice per message, and
	// a lock each time was a visible share of a memory store's claim.
	state atomic.Uint32
	// detach: parent's cancellation and deadline do not apply (a settling
	// call, Guard.settleCtx). parent becomes context.WithoutCancel(parent)
	// (wrapped) the first time anything but Err reads it, so a store that
	// reads Err only pays for no wrapper either. detach never changes, and
	// parent changes only when detach is set: Err reads parent without mu
	// only when it is not.
	detach  bool
	wrapped bool
	// The fields are in this order, and the inner context a pointer to a
	// pair made with it, so that the three of a run, and the run, fill
	// 288 bytes, where they filled 384 (fewer bytes to clear and collect
	// for every message).
}

// madeCtx is a callCtx's inner context, which answers everything once
// made, and its cancel.
type madeCtx struct {
	ctx  context.Context
	stop context.CancelCauseFunc
}

// callEpoch is the origin of callCtx deadlines, a reading of the
// monotonic clock.
var callEpoch = time.Now()

// setDeadline makes t, a reading of time.Now or a time derived from one,
// c's deadline.
func (c *callCtx) setDeadline(t time.Time) {
	c.deadline = max(int64(t.Sub(callEpoch)), 1)
}

// end is c's deadline as a time (c.deadline is not 0).
func (c *callCtx) end() time.Time { return callEpoch.Add(time.Duration(c.deadline)) }

// A callCtx's states.
const (
	callLive  = iota // nothing waits on it, and it has not ended
	callEnded        // cancelled before anything waited: Err is Canceled
	callMade         // inner answers everything
)

// closedChan is the Done of a callCtx cancelled before anything waited.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// base returns the parent the context derives from. Called with mu held.
func (c *callCtx) base() context.Context {
	if c.detach && !c.wrapped {
		c.parent, c.wrapped = context.WithoutCancel(c.parent), true
	}
	return c.parent
}

// makeInner makes the context that answers from now on and reports
// whether the context had ended (a cancel without mu may come at any
// moment before inner is in place): the caller then ends inner, with its
// own cause if it has one. Called with mu held, when made is nil.
func (c *callCtx) makeInner() (ended bool) {
	m := new(madeCtx)
	if c.deadline == 0 {
		m.ctx, m.stop = context.WithCancelCause(c.base())
	} else {
		inner, stop := context.WithDeadline(c.base(), c.end())
		m.ctx, m.stop = inner, func(error) { stop() }
	}
	c.made = m
	return c.state.Swap(callMade) == callEnded
}

// answer makes inner, ended if the context has. Called with mu held.
func (c *callCtx) answer() {
	if c.made == nil && c.makeInner() {
		c.made.stop(nil)
	}
}

// Deadline implements context.Context.
func (c *callCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	d, ok := c.base().Deadline()
	c.mu.Unlock()
	if c.deadline == 0 {
		return d, ok
	}
	if end := c.end(); !ok || end.Before(d) {
		return end, true
	}
	return d, ok
}

// Done implements context.Context.
func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made == nil && c.state.Load() == callEnded {
		return closedChan
	}
	c.answer()
	return c.made.ctx.Done()
}

// Err implements context.Context. Before anything waited on Done it reads
// the parent and the clock, without a lock; a context past its end gets
// its inner one, so that Err, Done and Cause agree from then on.
func (c *callCtx) Err() error {
	switch c.state.Load() {
	case callEnded:
		return context.Canceled
	case callLive:
		if (c.detach || c.parent.Err() == nil) && (c.deadline == 0 || int64(time.Since(callEpoch)) < c.deadline) {
			return nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made == nil && c.state.Load() == callEnded {
		return context.Canceled
	}
	c.answer()
	return c.made.ctx.Err()
}

// Value implements context.Context.
func (c *callCtx) Value(key any) any {
	if _, ok := key.(keyCtx); ok && c.key != nil {
		return *c.key
	}
	c.mu.Lock()
	var from context.Context
	if c.made != nil {
		from = c.made.ctx
	} else {
		from = c.base()
	}
	c.mu.Unlock()
	return from.Value(key)
}

// cancel ends the context, with cause when it is not nil (a lost lease:
// the handler reads it with context.Cause). Its cost is one atomic step
// unless something waited on Done, or cause is set.
func (c *callCtx) cancel(cause error) {
	if cause == nil && c.state.CompareAndSwap(callLive, callEnded) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made == nil {
		if cause == nil {
			return // ended already
		}
		c.makeInner()
	}
	c.made.stop(cause)
}

// String names the context in a context's String, as the standard ones do.
func (c *callCtx) String() string { return "idem.callCtx" }
