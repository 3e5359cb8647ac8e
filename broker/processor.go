package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/lazyctx"
)

// Processor runs one delivery end to end: the claim and the handler under
// the guard, the hold of a key in progress elsewhere, the store-outage
// hold, the decision, the hooks, the settle (ack, retry, dead letter with
// DeadLetterHeaders) and the keep-alive throughout. It schedules nothing:
// a Consumer calls it for what its Transport receives, and adapters that
// schedule deliveries themselves call Process or ProcessUntil. It is safe
// for concurrent use as far as its Settler is.
type Processor[M any] struct {
	e    *Engine[M]
	t    Settler[M]
	caps capabilities[M]
}

// NewProcessor returns the processor of the deliveries t settles, running
// h under g: NewEngine(g, h, opts) and its Processor(t). A nil t is refused
// as NewEngine's errors are, wrapping idem.ErrInvalidOptions.
func NewProcessor[M any](t Settler[M], g *idem.Guard, h Handler[M], opts Options[M]) (*Processor[M], error) {
	if t == nil {
		return nil, fmt.Errorf("%w: broker: nil settler", idem.ErrInvalidOptions)
	}
	e, err := NewEngine(g, h, opts)
	if err != nil {
		return nil, err
	}
	return e.Processor(t), nil
}

// settleTimeout bounds an ack, a retry or a dead letter when the handler's
// context has ended (shutdown): the outcome is known and should reach the
// broker.
const settleTimeout = 10 * time.Second

// Process handles one delivery and settles it, with the hooks. A delivery
// whose key is in progress elsewhere, or whose store cannot be reached, is
// held inline, so Process may block that long; when ctx ends it is handed
// back (a last delivery is dead-lettered rather than dropped). Call it
// from any goroutine.
func (p *Processor[M]) Process(ctx context.Context, msg M) Report {
	return p.ProcessUntil(ctx, ctx.Done(), msg)
}

// ProcessUntil is Process with the end of the holds apart from the
// handler's context: a hold (in progress elsewhere, a store outage) ends
// when stop closes (a nil stop never does) or ctx ends, while a running
// handler is cut only by ctx. Adapters that schedule deliveries themselves
// (Kafka's partitions, one record at a time in order) call it per
// delivery: stop is their graceful stop, ctx their hard one. A Retry
// report from a transport whose Retry is in place (it does not redeliver)
// is the transport's to wait out (Report.Delay) and process again.
func (p *Processor[M]) ProcessUntil(ctx context.Context, stop <-chan struct{}, msg M) Report {
	var dv delivery[M]
	d := &dv
	p.begin(d, ctx, msg)
	until := stop
	merged := false
	for {
		wait, held := p.claim(d, stop)
		if !held {
			break
		}
		if !merged {
			// Only a hold waits on both (most deliveries never do): no
			// goroutine per delivery.
			until, merged = mergeDone(stop, ctx.Done()), true
		}
		if !sleep(wait, until) {
			break
		}
	}
	return p.settle(d, p.decide(d), until)
}

func (p *Processor[M]) reportErr(err error) { p.e.obs.reportError(err) }

// delivery is one delivery on its way through the processor: the guard's
// answer to its latest claim and how long it has been held.
type delivery[M any] struct {
	msg   M
	im    idem.Message
	d     Delivery
	ctx   context.Context // the handler's context
	kactx *lazyctx.Ctx    // under ctx with a keep-alive, cancelled with ErrLockLost; nil without one
	ka    *keepAlive[M]   // the keep-alive, until it ends; nil without one

	res idem.Result
	err error

	heldSince time.Time // when the first in-progress hold began
	rounds    int       // in-progress hold rounds
	outages   int       // store-outage rounds
	outage    bool      // the latest claim met a store outage
}

// begin starts msg's way in d: its guard view, its delivery count and its
// keep-alive, which runs until its broker action, holds included. d is the
// caller's (ProcessUntil's is on its stack: nothing keeps a pointer to it).
func (p *Processor[M]) begin(d *delivery[M], parent context.Context, msg M) {
	*d = delivery[M]{msg: msg, im: p.t.Message(msg), d: p.t.Delivery(msg), ctx: parent}
	if d.d.Attempt < 1 {
		d.d.Attempt = 1
	}
	if p.caps.keepAlive != nil {
		if every := p.caps.keepAlive.KeepAliveEvery(msg); every > 0 {
			ka := &keepAlive[M]{p: p, msg: msg, every: every}
			ka.ctx.Init(parent, time.Time{}, false)
			d.kactx = &ka.ctx
			// While a two-phase handler runs, the guard's heartbeat renews
			// the message with the record's lease (one clock decides when
			// it is lost); the timer keeps it alive in between: holds,
			// outages, the inbox, and a lease longer than the lock.
			d.ctx = idem.ContextWithRenewal(&ka.ctx, ka.renew)
			ka.start()
			d.ka = ka
		}
	}
}

// lockLost is the transport's ErrLockLost once the keep-alive met it.
func (d *delivery[M]) lockLost() error {
	if d.kactx == nil {
		return nil
	}
	if cause := context.Cause(d.kactx); errors.Is(cause, ErrLockLost) {
		return cause
	}
	return nil
}

// endKeepAlive stops the keep-alive (idempotent).
func (d *delivery[M]) endKeepAlive() {
	if d.ka != nil {
		d.ka.stop()
		d.ka = nil
	}
}

// minPoll keeps a held delivery from claiming in a tight loop when the
// back-off is zero.
const minPoll = 10 * time.Millisecond

// maxHoldPoll bounds the pace at which a delivery held in progress
// elsewhere is claimed again: a holder that releases its key (its handler
// failed) is seen within it, not at the lease end the waiter last read.
const maxHoldPoll = time.Second

// claim runs the handler for d once under the guard. held reports that d
// is to be kept and claimed again after wait: its key is in progress
// elsewhere (within MaxHold), or the store could not be reached (d.outage)
// and the delivery is not to spend a broker delivery on it. stop closes
// at shutdown: an outage then no longer holds, except a last delivery.
func (p *Processor[M]) claim(d *delivery[M], stop <-chan struct{}) (wait time.Duration, held bool) {
	e := p.e
	var (
		res idem.Result
		err error
	)
	if p.caps.runner != nil {
		res, err = p.caps.runner.RunHandler(d.ctx, e.h, e.g, d.im, d.msg)
	} else {
		res, err = e.h.Run(d.ctx, e.g, d.im, d.msg)
	}
	if d.err != nil && d.ctx.Err() != nil && res.Outcome == idem.OutcomeStoreError && errors.Is(err, d.ctx.Err()) {
		// A claim of a held delivery cut short by the handlers' context
		// ending (the shutdown's last claims): the previous answer stands,
		// so that a last delivery's dead letter carries the holder's
		// record, not the engine's own cancellation.
		return 0, false
	}
	d.res, d.err = res, err
	d.outage = false
	if d.lockLost() != nil || d.ctx.Err() != nil {
		return 0, false
	}
	switch {
	case errors.Is(d.err, idem.ErrInProgress):
		if e.opts.MaxHold < 0 && !d.d.Last {
			return 0, false
		}
		if d.heldSince.IsZero() {
			d.heldSince = time.Now()
		}
		d.rounds++
		// Claimed again on the back-off, so a holder that finishes (or
		// releases) early is seen early, and at the latest when its lease
		// ends, so a crashed holder's claim is retaken then.
		b := min(e.opts.Backoff(d.rounds), maxHoldPoll)
		wait = max(min(b, idem.RetryAfter(d.res, d.err, e.clock(), b)), minPoll)
		if !d.d.Last {
			// The last claim is at MaxHold, so a delivery handed back was
			// held that long (no quick round trips through the broker).
			left := e.opts.MaxHold - time.Since(d.heldSince)
			if left <= 0 {
				return 0, false
			}
			wait = min(wait, left)
		}
		return wait, true
	case isOutage(d.res, d.err):
		if stop != nil && isClosed(stop) && !d.d.Last {
			return 0, false
		}
		d.outage = true
		d.outages++
		e.outage.report(&e.obs, d.err)
		return max(e.opts.Backoff(d.outages), minPoll), true
	}
	return 0, false
}

// decide is the Report of d's latest claim: broker.Decide, except that a
// retry becomes a dead letter with ReasonMaxDeliver when the handler has
// failed MaxDeliveries times, or when this is the broker's last allowed
// delivery (the broker would drop it, or dead-letter it without idem's
// headers).
func (p *Processor[M]) decide(d *delivery[M]) Report {
	if lost := d.lockLost(); lost != nil {
		return Report{Result: d.res, Err: d.err, Action: idem.ActionRetry, Attempt: d.d.Attempt, BrokerErr: lost}
	}
	opts := &p.e.opts
	var now time.Time
	if d.err != nil { // only a retry's delay reads the clock; a nil error is an ack
		now = p.e.clock()
	}
	r := Decide(d.res, d.err, now, d.d.Attempt, opts.Backoff)
	if r.Action != idem.ActionRetry {
		return r
	}
	if d.d.Last || (opts.MaxDeliveries > 0 && d.res.Outcome == idem.OutcomeFailed && p.failures(d) >= opts.MaxDeliveries) {
		r.Action, r.Reason, r.Delay = idem.ActionDeadLetter, ReasonMaxDeliver, 0
	}
	return r
}

// failures is how many times the handler has failed d's message, counted
// where it is durable: the record's claims in two-phase mode (a released
// record keeps them), the broker's delivery count in the transactional
// inbox, whose marker rolls back with the failure.
func (p *Processor[M]) failures(d *delivery[M]) int {
	if p.e.h.fn != nil && d.res.Record.Attempts > 0 {
		return d.res.Record.Attempts
	}
	return d.d.Attempt
}

// waitsToSettle reports whether settling r waits out a retry's delay (a
// transport that cannot delay): a Consumer settles such a delivery on a
// goroutine of its own, freeing its worker.
func (p *Processor[M]) waitsToSettle(d *delivery[M], r Report) bool {
	return r.Action == idem.ActionRetry && !p.caps.delays && r.Delay > 0 && d.lockLost() == nil
}

// settle takes the broker action of r for d, calling the hooks around it,
// and returns the report. A retry the transport cannot delay waits here
// (kept alive) until its delay or stop.
func (p *Processor[M]) settle(d *delivery[M], r Report, stop <-chan struct{}) Report {
	hooks := p.e.opts.Hooks
	hooks.CallBeforeSettle(d.ctx, d.msg, r)
	if d.lockLost() != nil {
		// The broker took the delivery back: nothing to settle; it comes
		// back and its record decides again.
		d.endKeepAlive()
		p.settled(d, r)
		return r
	}
	if r.Action == idem.ActionRetry && !p.caps.delays {
		r.Delay = waitOut(r.Delay, stop, d.ctx)
	}
	actx := d.ctx
	if !p.caps.inPlace || r.Action == idem.ActionDeadLetter {
		sc := newSettleCtx(d.ctx)
		defer sc.Cancel(nil)
		actx = sc
	}
	switch r.Action {
	case idem.ActionAck:
		d.endKeepAlive()
		r.BrokerErr = p.t.Ack(actx, d.msg)
	case idem.ActionRetry:
		d.endKeepAlive()
		r.BrokerErr = p.t.Retry(actx, d.msg, p.retryDelay(r.Delay))
	case idem.ActionDeadLetter:
		// Kept alive until the dead letter is durable (or has failed and
		// its back-off is waited out): the delivery stays ours meanwhile.
		h := DeadLetterHeaders(actx, p.e.g, d.im, d.res, d.err, r.Reason)
		r.Reason = h[idem.HeaderReason]
		err := p.t.DeadLetter(actx, d.msg, DeadLetter{Reason: r.Reason, Headers: h, Attempt: d.d.Attempt})
		if err != nil {
			// Not settled: the delivery comes back and is dead-lettered
			// again once the dead-letter destination takes it.
			r.BrokerErr = fmt.Errorf("broker: dead letter (%s): %w", r.Reason, err)
			r.Delay = p.e.opts.Backoff(d.d.Attempt)
			p.reportErr(r.BrokerErr)
			if !p.caps.delays {
				r.Delay = waitOut(r.Delay, stop, d.ctx)
			}
			d.endKeepAlive()
			rctx := newSettleCtx(d.ctx)
			if rerr := p.t.Retry(rctx, d.msg, p.retryDelay(r.Delay)); rerr != nil {
				r.BrokerErr = fmt.Errorf("%w; retry: %w", r.BrokerErr, rerr)
			}
			rctx.Cancel(nil)
			break
		}
		d.endKeepAlive()
		r.DeadLettered = true
		hooks.CallOnDeadLetter(d.ctx, d.msg, r)
	}
	if r.BrokerErr != nil && r.Action != idem.ActionDeadLetter {
		p.reportErr(fmt.Errorf("broker: %s: %w", r.Action, r.BrokerErr))
	}
	if d.kactx != nil {
		d.kactx.Cancel(nil)
	}
	p.settled(d, r)
	return r
}

// settled reports d's settle r to the guard's observer and AfterSettle.
func (p *Processor[M]) settled(d *delivery[M], r Report) {
	if so := p.e.obs.settle; so != nil {
		so.ObserveSettlement(d.ctx, r)
	}
	p.e.opts.Hooks.CallAfterSettle(d.ctx, d.msg, r)
}

// retryDelay is the delay handed to Retry: none when the transport does
// not delay (the engine waited it out).
func (p *Processor[M]) retryDelay(delay time.Duration) time.Duration {
	if !p.caps.delays {
		return 0
	}
	return delay
}
