package idem

import (
	"context"
	"errors"
	"sync"
	"time"
)

// heartbeat renews the leases of a guard's running handlers, each a period
// (Lease/3) after it started or was last renewed. One timer serves them
// all: most handlers finish long before their first renewal is due, and pay
// for joining and leaving a list instead of arming and stopping a timer
// each. The timer runs only while a handler does; no goroutine outlives the
// renewals it starts.
type heartbeat struct {
	every time.Duration

	mu         sync.Mutex
	head, tail *run // queued runs, in the order their renewals fall due
	timer      *time.Timer
	armed      bool // timer will fire
}

func newHeartbeat(lease time.Duration) *heartbeat { return &heartbeat{every: lease / 3} }

// runState says where a run is on the heartbeat.
type runState uint8

const (
	runQueued   runState = iota // waiting for its renewal
	runRenewing                 // a renewal is in flight
	runEnded                    // the handler returned
)

// run is one handler's run under its lease: the handler's context, its
// place on the heartbeat, and the context of the complete that follows (one
// allocation for the three).
type run struct {
	ctx    callCtx // the handler's: ErrLeaseLost is its cause when the lease is lost
	settle callCtx // the complete's (settleCtx)
	g      *Guard
	outer  context.Context // the call's, for the observer's steps
	token  int64

	// Under the heartbeat's mu.
	prev, next *run
	due        time.Time
	state      runState
	renewing   sync.WaitGroup
}

// add queues r for its first renewal, a period after now (when its handler
// starts).
func (hb *heartbeat) add(r *run, now time.Time) {
	hb.mu.Lock()
	hb.queue(r, now)
	hb.mu.Unlock()
}

// queue puts r last, due a period after now. The list is in the order of
// due times, so only its head needs the timer; times read by concurrent
// callers may be queued a few microseconds out of order, which delays a
// renewal by as much, against the two periods of slack a lease has.
// Called with mu held.
func (hb *heartbeat) queue(r *run, now time.Time) {
	r.state, r.due = runQueued, now.Add(hb.every)
	r.prev, r.next = hb.tail, nil
	if hb.tail != nil {
		hb.tail.next = r
	} else {
		hb.head = r
	}
	hb.tail = r
	if !hb.armed {
		// The timer may fire early (for a head that left since): fire then
		// finds nothing due and waits for the new head.
		hb.armed = true
		if hb.timer == nil {
			hb.timer = time.AfterFunc(hb.every, hb.fire)
		} else {
			hb.timer.Reset(hb.every)
		}
	}
}

// unlink takes a queued r off the list. Called with mu held.
func (hb *heartbeat) unlink(r *run) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		hb.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		hb.tail = r.prev
	}
	r.prev, r.next = nil, nil
}

// remove ends r's renewals: none starts after it returns.
func (hb *heartbeat) remove(r *run) {
	hb.mu.Lock()
	if r.state == runQueued {
		hb.unlink(r)
	}
	r.state = runEnded
	hb.mu.Unlock()
}

// fire starts the renewals that are due, each in its own goroutine (a
// renewal is a store round trip, bounded by StoreTimeout), and sets the
// timer for the next.
func (hb *heartbeat) fire() {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.armed = false
	now := time.Now()
	for r := hb.head; r != nil && !now.Before(r.due); r = hb.head {
		hb.unlink(r)
		r.state = runRenewing
		r.renewing.Add(1)
		go r.renew()
	}
	if hb.head != nil {
		hb.armed = true
		hb.timer.Reset(hb.head.due.Sub(now))
	}
}

// renew renews r's lease once. A lost lease cancels the handler's context
// with cause ErrLeaseLost; other errors are transient: the next renewal a
// period later tries again, and the lease is three periods long.
func (r *run) renew() {
	defer r.renewing.Done()
	g := r.g
	now := g.opts.Clock()
	// Under the handler's context: a renewal stuck on a row lock or a
	// half-open connection ends when the handler returns, and never lasts
	// longer than StoreTimeout, so Do never waits on one.
	sctx := g.storeCtx(&r.ctx)
	err := g.store.Renew(sctx, RenewRequest{Key: r.ctx.key, Token: r.token, Now: now, LeaseUntil: now.Add(g.opts.Lease)})
	sctx.cancel(nil)
	if err != nil && r.ctx.Err() == nil {
		g.step(r.outer, Step{Key: r.ctx.key, Op: "renew", Token: r.token, Err: err})
	}
	if errors.Is(err, ErrLeaseLost) {
		r.ctx.cancel(ErrLeaseLost)
		return
	}
	if err == nil {
		r.renewWith()
	}
	hb := g.hb
	hb.mu.Lock()
	if r.state == runRenewing {
		hb.queue(r, time.Now())
	}
	hb.mu.Unlock()
}

// runLeased runs h for the claim of key that r holds (its g, outer and
// token set), under its lease, renewed by the guard's heartbeat; h starts
// at started. If the lease is lost, h's context is cancelled with cause
// ErrLeaseLost and lost is true. A panic in h releases the claim and is
// re-raised.
func (g *Guard) runLeased(r *run, key Key, h Handler, started time.Time) (value []byte, err error, lost bool) {
	r.ctx.parent, r.ctx.key, r.ctx.hasKey = r.outer, key, true
	g.hb.add(r, started)
	defer func() {
		g.hb.remove(r)
		r.ctx.cancel(nil) // ends a renewal in flight
		r.renewing.Wait()
		if p := recover(); p != nil {
			g.release(r.outer, key, r.token, nil)
			panic(p)
		}
	}()
	value, err = h(&r.ctx)
	lost = errors.Is(context.Cause(&r.ctx), ErrLeaseLost)
	return value, err, lost
}

// settleCtx is Guard.settleCtx for the complete after r's handler returned
// at now, in r's own memory.
func (r *run) settleCtx(now time.Time) *callCtx {
	r.g.bound(&r.settle, r.outer, now, true)
	return &r.settle
}

type renewalCtx struct{}

// ContextWithRenewal returns a context whose guard calls renew each time it
// renews the lease of a handler called with it, right after the store's
// Renew succeeds: one clock, the guard's heartbeat (every Lease/3), for the
// record's lease and whatever else holds the message, such as a broker's
// lock (package broker's engine passes its transport's keep-alive). renew
// runs under the handler's context, bounded by StoreTimeout. It returns an
// error only when the message is lost (a broker lock taken back): the
// handler's context is then cancelled with that error as its cause, and the
// guard releases the claim when the handler returns, as for any failure.
// Transient failures it reports itself and returns nil: the next renewal
// tries again.
func ContextWithRenewal(ctx context.Context, renew func(ctx context.Context) error) context.Context {
	return context.WithValue(ctx, renewalCtx{}, renew)
}

// renewWith runs the ContextWithRenewal function of r's call, if any,
// after a renewal of its lease.
func (r *run) renewWith() {
	renew, _ := r.outer.Value(renewalCtx{}).(func(context.Context) error)
	if renew == nil {
		return
	}
	ctx, cancel := context.WithTimeout(&r.ctx, r.g.opts.StoreTimeout)
	err := renew(ctx)
	cancel()
	if err != nil && r.ctx.Err() == nil {
		r.ctx.cancel(err)
	}
}
