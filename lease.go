package idem

import (
	"context"
	"errors"
	"sync"
	"time"
)

// heartbeat renews the leases of a guard's running handlers. One timer
// serves them all: most handlers finish long before their first renewal is
// due, and pay for joining and leaving a list instead of arming and stopping
// a timer each. The timer runs only while a handler does; no goroutine
// outlives the renewals it starts.
//
// Its times are counted from a lease's end, never from when a store's
// answer arrived: a lease ends Lease after the claim or renewal that set it
// was sent (its LeaseUntil, from a Now read at the sending), so an answer
// that arrives late has used up part of the lease already. A run's next
// renewal is due a third of the lease after the request that set its lease
// was sent, or as soon as that answer is at hand if it came later; one
// renewal of a run is in flight at a time, and a slow answer delays the
// next renewal only until it arrives, never by a whole period. While a
// renewal is in flight the run waits on the heartbeat for its lease's end
// less the margin (Lease/10): if no renewal has answered by then, its
// handler's context is cancelled with a cause that is ErrLeaseLost
// (errLeaseRanOut), so the handler stops before a rival's claim can find
// the lease ended and run the key beside it. The margin is the time the
// handler has to stop, and covers the clock skew between instances and a
// timer firing late. A store whose round trips stay under 0.45 Lease (half
// the lease less the margin) keeps every lease; a slower one costs
// handlers their runs (retried on redelivery), never a second holder.
//
// Those times are real time (the monotonic clock of time.Now), as timers
// are; the record times the requests carry come from Options.Clock, which
// is expected to advance with it.
type heartbeat struct {
	lease  time.Duration
	every  time.Duration // Lease/3: a renewal is due this long after the last was sent
	margin time.Duration // Lease/10: a run still unrenewed this long before its lease's end stops
	epoch  time.Time     // the heartbeat's times are offsets from it (monotonic)

	mu         sync.Mutex
	head, tail *run // the runs on the heartbeat, in the order of their due times
	timer      *time.Timer
	armed      bool          // timer will fire
	at         time.Duration // when it will
}

// leaseMargin divides the lease into the margin before its end at which a
// run whose renewal has not answered stops (see heartbeat).
const leaseMargin = 10

func newHeartbeat(lease time.Duration) *heartbeat {
	return &heartbeat{lease: lease, every: lease / 3, margin: lease / leaseMargin, epoch: time.Now()}
}

// since is t as an offset of the heartbeat's.
func (hb *heartbeat) since(t time.Time) time.Duration { return t.Sub(hb.epoch) }

// tooLate reports whether a lease set by a request sent at sent is too
// near its end at now for a handler to start under it.
func (hb *heartbeat) tooLate(sent, now time.Time) bool {
	return now.Sub(sent) >= hb.lease-hb.margin
}

// runState says where a run is on the heartbeat.
type runState uint8

const (
	runQueued   runState = iota // waiting for its next renewal
	runRenewing                 // a renewal is in flight; waiting for its lease's end less the margin
	runEnded                    // off the heartbeat: the handler returned, or its lease was lost or ran out
)

// errLeaseRanOut is the cause a handler's context is cancelled with when
// its lease comes within the margin of its end and no renewal has answered:
// the key may still be the caller's, but a rival's claim may take it over
// at any moment. It is ErrLeaseLost for errors.Is.
var errLeaseRanOut error = &leaseEndError{"not renewed in time: its end came near with no renewal answered (the store answers too slowly, or not at all)"}

// leaseEndError is a lease that ended, or was about to, before the store
// confirmed it: errors.Is(err, ErrLeaseLost), which Decide retries.
type leaseEndError struct{ why string }

func (e *leaseEndError) Error() string { return "idem: lease lost: " + e.why }
func (e *leaseEndError) Unwrap() error { return ErrLeaseLost }

// run is one handler's run under its lease: the handler's context, its
// place on the heartbeat, and, in a storeRun, the contexts of the claim
// before it (Guard.Do's) and of the complete that follows: one allocation
// for them all (Guard.newRun).
type run struct {
	ctx    callCtx  // the handler's: its cause is ErrLeaseLost when the lease is lost or runs out
	settle *callCtx // the complete's (settleCtx), in its storeRun; nil for a store in memory
	g      *Guard
	outer  context.Context // the call's, for the observer's steps
	key    Key             // the key the handler runs for (its context answers it)
	token  int64

	// Under the heartbeat's mu; times are heartbeat offsets (since).
	prev, next *run
	due        time.Duration // when the heartbeat looks at it next
	end        time.Duration // when its lease ends: the send of the latest request that set it, plus Lease
	state      runState
	renewing   sync.WaitGroup
}

// add puts r on the heartbeat for the lease a request sent at sent set
// (the claim's, or a ticket's renewal's), as its handler starts.
func (hb *heartbeat) add(r *run, sent time.Time) {
	s := hb.since(sent)
	hb.mu.Lock()
	r.end = s + hb.lease
	hb.queue(r, s+hb.every)
	hb.mu.Unlock()
}

// queue puts r on the heartbeat for a renewal due at due, or for its
// lease's end less the margin if that comes first (its renewals failed).
// Called with mu held.
func (hb *heartbeat) queue(r *run, due time.Duration) {
	r.state = runQueued
	hb.insert(r, min(due, r.end-hb.margin))
}

// insert puts r on the list at due, after the runs due no later, and arms
// the timer if r is due before it fires. New runs are due last but for a
// few (a claim answered slower than its neighbours') and for the runs whose
// renewal is in flight (due at their lease's end), so the walk from the
// tail is short. Called with mu held.
func (hb *heartbeat) insert(r *run, due time.Duration) {
	r.due = due
	at := hb.tail
	for at != nil && due < at.due {
		at = at.prev
	}
	r.prev = at
	if at == nil {
		r.next, hb.head = hb.head, r
	} else {
		r.next, at.next = at.next, r
	}
	if r.next == nil {
		hb.tail = r
	} else {
		r.next.prev = r
	}
	if r == hb.head && (!hb.armed || due < hb.at) {
		// A timer armed for a later head (or for one that left since: fire
		// then finds nothing due) is set again.
		hb.arm(due, hb.since(time.Now()))
	}
}

// arm sets the timer to fire at due. Called with mu held.
func (hb *heartbeat) arm(due, now time.Duration) {
	hb.armed, hb.at = true, due
	if hb.timer == nil {
		hb.timer = time.AfterFunc(due-now, hb.fire)
	} else {
		hb.timer.Reset(due - now)
	}
}

// unlink takes r off the list. Called with mu held.
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
	if r.state != runEnded {
		hb.unlink(r)
		r.state = runEnded
	}
	hb.mu.Unlock()
}

// fire handles the runs that are due: one whose lease is within the margin
// of its end with no renewal answered is stopped (its handler's context
// cancelled with errLeaseRanOut); one waiting for its renewal starts it,
// in a goroutine of its own (a store round trip, bounded by StoreTimeout),
// and waits for its lease's end less the margin while it is in flight.
// Then the timer is set for the next.
func (hb *heartbeat) fire() {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.armed = false
	now := hb.since(time.Now())
	for r := hb.head; r != nil && r.due <= now; r = hb.head {
		hb.unlink(r)
		last := r.end - hb.margin
		switch {
		case now >= last:
			r.state = runEnded
			r.ctx.cancel(errLeaseRanOut)
		case r.state == runQueued:
			r.state = runRenewing
			r.renewing.Add(1)
			hb.insert(r, last)
			go r.renew()
		default:
			// In flight still, but an answer moved its lease's end on since
			// (the keep-alive of ContextWithRenewal runs before it is queued).
			hb.insert(r, last)
		}
	}
	if hb.head != nil && (!hb.armed || hb.head.due < hb.at) {
		hb.arm(hb.head.due, now)
	}
}

// renewed records the answer to r's renewal sent at sent: a success moves
// its lease's end to sent plus Lease. It reports whether r still waits for
// the renewal (its handler runs and its lease has not run out).
func (hb *heartbeat) renewed(r *run, sent time.Time, err error) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if err == nil {
		r.end = max(r.end, hb.since(sent)+hb.lease)
	}
	return r.state == runRenewing
}

// next queues r, whose renewal sent at sent has been handled, for the one
// after it: due a period after sent (at once if that is past), whether the
// renewal answered in time, late or with an error.
func (hb *heartbeat) next(r *run, sent time.Time) {
	hb.mu.Lock()
	if r.state == runRenewing {
		hb.unlink(r)
		hb.queue(r, hb.since(sent)+hb.every)
	}
	hb.mu.Unlock()
}

// renew renews r's lease once. A lost lease cancels the handler's context
// with cause ErrLeaseLost; other errors are transient: the next renewal a
// period after this one was sent tries again, if the lease has not run out
// by then.
func (r *run) renew() {
	defer r.renewing.Done()
	g := r.g
	hb := g.hb
	sent := time.Now()
	now := g.clockAt(sent)
	// Under the handler's context: a renewal stuck on a row lock or a
	// half-open connection ends when the handler returns or its lease runs
	// out, and never lasts longer than StoreTimeout, so Do never waits on
	// one.
	sctx := g.storeCtxAt(&r.ctx, sent)
	err := g.store.Renew(sctx, RenewRequest{Key: r.key, Token: r.token, Now: now, LeaseUntil: now.Add(g.opts.Lease)})
	sctx.cancel(nil)
	if err != nil && r.ctx.Err() == nil {
		g.step(r.outer, Step{Key: r.key, Op: "renew", Token: r.token, Err: err})
	}
	if errors.Is(err, ErrLeaseLost) {
		r.ctx.cancel(ErrLeaseLost)
		hb.remove(r)
		return
	}
	if hb.renewed(r, sent, err) && err == nil {
		r.renewWith()
	}
	hb.next(r, sent)
}

// runLeased runs h for the claim of key that r holds (its g, outer and
// token set), under the lease set by the request sent at sent, renewed by
// the guard's heartbeat. If the lease is lost (another owner took the key)
// or runs out (no renewal answered in time), h's context is cancelled and
// lost is the cause, an ErrLeaseLost: errLeaseRanOut when it ran out. A
// panic in h releases the claim and is re-raised.
func (g *Guard) runLeased(r *run, key Key, h Handler, sent time.Time) (value []byte, err error, lost error) {
	r.key = key
	r.ctx.parent, r.ctx.key = r.outer, &r.key
	g.hb.add(r, sent)
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
	if cause := context.Cause(&r.ctx); errors.Is(cause, ErrLeaseLost) {
		lost = cause
	}
	return value, err, lost
}

// storeRun is a run with the contexts of its store calls, for a store
// that is not in memory: 320 bytes. A store in memory (Guard.inMemory)
// runs its calls under the caller's context (a claim) and under
// context.Background (a complete, which must run whatever the caller's
// context says), since they cannot hang and it reads nothing of a
// context but Err: its run is 192 bytes.
type storeRun struct {
	run           run
	claim, settle callCtx
}

// newRun makes the run of a call under ctx and, for a store that is not
// in memory, the context its claim is to be made under (nil: the
// caller's).
func (g *Guard) newRun(ctx context.Context) (*run, *callCtx) {
	if g.inMemory {
		return &run{g: g, outer: ctx}, nil
	}
	sr := &storeRun{run: run{g: g, outer: ctx}}
	sr.run.settle = &sr.settle
	return &sr.run, &sr.claim
}

// settleRun is a run with the context of its complete alone, for a run
// whose claim was made before it (a batch's ticket) on a store that is not
// in memory: 256 bytes, where a storeRun is 320.
type settleRun struct {
	run    run
	settle callCtx
}

// newSettledRun is newRun for a claim made already (a ticket's): no claim
// context.
func (g *Guard) newSettledRun(ctx context.Context) *run {
	if g.inMemory {
		return &run{g: g, outer: ctx}
	}
	sr := &settleRun{run: run{g: g, outer: ctx}}
	sr.run.settle = &sr.settle
	return &sr.run
}

// settleCtx is Guard.settleCtx for the complete after r's handler returned
// at now, in r's own memory: nil for a store in memory, whose calls
// Guard.complete runs under context.Background.
func (r *run) settleCtx(now time.Time) *callCtx {
	if r.settle == nil {
		return nil
	}
	r.g.bound(r.settle, r.outer, now, true)
	return r.settle
}

type renewalCtx struct{}

// ContextWithRenewal returns a context whose guard calls renew each time it
// renews the lease of a handler called with it, right after the store's
// Renew succeeds: one clock, the guard's heartbeat (a renewal a third of
// the lease after the previous one was sent, or as soon as a slower answer
// arrives), for the record's lease and whatever else holds the message,
// such as a broker's lock (package broker's engine passes its transport's
// keep-alive). The next renewal waits for renew to return. renew runs
// under the handler's context, bounded by StoreTimeout. It returns an
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
