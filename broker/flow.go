package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
)

// delivery is one delivery on its way through the flow: the guard's answer
// to its latest claim and how long it has been held.
type delivery[M any] struct {
	msg    M
	im     idem.Message
	d      Delivery
	ctx    context.Context         // the handler's context
	cancel context.CancelCauseFunc // cancels ctx with ErrLockLost; nil without a KeepAliver
	stopKA func()                  // ends the keep-alive; nil without one

	res idem.Result
	err error

	heldSince time.Time // when the first in-progress hold began
	rounds    int       // in-progress hold rounds
	outages   int       // store-outage rounds
	outage    bool      // the latest claim met a store outage
}

// start begins msg's way in d: its guard view, its delivery count and its
// keep-alive, which runs until its broker action, holds included. d is the
// caller's (ProcessUntil's is on its stack: nothing keeps a pointer to it).
func (c *Consumer[M]) start(d *delivery[M], parent context.Context, msg M) {
	*d = delivery[M]{msg: msg, im: c.t.Message(msg), d: c.t.Delivery(msg), ctx: parent}
	if d.d.Attempt < 1 {
		d.d.Attempt = 1
	}
	if c.ka != nil {
		if every := c.ka.KeepAliveEvery(msg); every > 0 {
			d.ctx, d.cancel = context.WithCancelCause(parent)
			ka := &keepAlive[M]{c: c, msg: msg, every: every, lost: d.cancel}
			// While a two-phase handler runs, the guard's heartbeat renews
			// the message with the record's lease (one clock decides when
			// it is lost); the timer keeps it alive in between: holds,
			// outages, the inbox, and a lease longer than the lock.
			d.ctx = idem.ContextWithRenewal(d.ctx, ka.renew)
			d.stopKA = ka.start(d.ctx)
		}
	}
}

// lockLost is the transport's ErrLockLost once the keep-alive met it.
func (d *delivery[M]) lockLost() error {
	if d.cancel == nil {
		return nil
	}
	if cause := context.Cause(d.ctx); errors.Is(cause, ErrLockLost) {
		return cause
	}
	return nil
}

// endKeepAlive stops the keep-alive (idempotent) and releases the
// delivery's context.
func (d *delivery[M]) endKeepAlive() {
	if d.stopKA != nil {
		d.stopKA()
		d.stopKA = nil
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
func (c *Consumer[M]) claim(d *delivery[M], stop <-chan struct{}) (wait time.Duration, held bool) {
	var (
		res idem.Result
		err error
	)
	if c.runner != nil {
		res, err = c.runner.RunHandler(d.ctx, c.h, c.g, d.im, d.msg)
	} else {
		res, err = c.h.Run(d.ctx, c.g, d.im, d.msg)
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
		if c.opts.MaxHold < 0 && !d.d.Last {
			return 0, false
		}
		if d.heldSince.IsZero() {
			d.heldSince = time.Now()
		}
		d.rounds++
		// Claimed again on the back-off, so a holder that finishes (or
		// releases) early is seen early, and at the latest when its lease
		// ends, so a crashed holder's claim is retaken then.
		b := min(c.opts.Backoff(d.rounds), maxHoldPoll)
		wait = max(min(b, idem.RetryAfter(d.res, d.err, c.g.Options().Clock(), b)), minPoll)
		if !d.d.Last {
			// The last claim is at MaxHold, so a delivery handed back was
			// held that long (no quick round trips through the broker).
			left := c.opts.MaxHold - time.Since(d.heldSince)
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
		c.outage.report(c.opts.Hooks.OnError, d.err)
		return max(c.opts.Backoff(d.outages), minPoll), true
	}
	return 0, false
}

// isOutage reports whether a guard call failed because the store could not
// be reached (down, timed out): not the message's fault, so it spends no
// delivery and counts as no failure.
func isOutage(res idem.Result, err error) bool {
	return err != nil && res.Outcome == idem.OutcomeStoreError && !idem.IsPermanent(err)
}

// decide is the Report of d's latest claim: broker.Decide, except that a
// retry becomes a dead letter with ReasonMaxDeliver when the handler has
// failed MaxDeliveries times, or when this is the broker's last allowed
// delivery (the broker would drop it, or dead-letter it without idem's
// headers).
func (c *Consumer[M]) decide(d *delivery[M]) Report {
	if lost := d.lockLost(); lost != nil {
		return Report{Result: d.res, Err: d.err, Action: idem.ActionRetry, Attempt: d.d.Attempt, BrokerErr: lost}
	}
	r := Decide(d.res, d.err, c.g.Options().Clock(), d.d.Attempt, c.opts.Backoff)
	if r.Action != idem.ActionRetry {
		return r
	}
	if d.d.Last || (c.opts.MaxDeliveries > 0 && d.res.Outcome == idem.OutcomeFailed && c.failures(d) >= c.opts.MaxDeliveries) {
		r.Action, r.Reason, r.Delay = idem.ActionDeadLetter, ReasonMaxDeliver, 0
	}
	return r
}

// failures is how many times the handler has failed d's message, counted
// where it is durable: the record's claims in two-phase mode (a released
// record keeps them), the broker's delivery count in the transactional
// inbox, whose marker rolls back with the failure.
func (c *Consumer[M]) failures(d *delivery[M]) int {
	if c.h.fn != nil && d.res.Record.Attempts > 0 {
		return d.res.Record.Attempts
	}
	return d.d.Attempt
}

// settle takes the broker action of r for d, calling the hooks around it,
// and returns the report. A retry the transport cannot delay waits here
// (kept alive) until its delay or stop.
func (c *Consumer[M]) settle(d *delivery[M], r Report, stop <-chan struct{}) Report {
	hooks := c.opts.Hooks
	hooks.CallBeforeSettle(d.ctx, d.msg, r)
	if d.lockLost() != nil {
		// The broker took the delivery back: nothing to settle; it comes
		// back and its record decides again.
		d.endKeepAlive()
		hooks.CallAfterSettle(d.ctx, d.msg, r)
		return r
	}
	if r.Action == idem.ActionRetry && !c.delays {
		r.Delay = waitOut(r.Delay, stop, d.ctx)
	}
	actx := d.ctx
	if !c.local || r.Action == idem.ActionDeadLetter {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(context.WithoutCancel(d.ctx), settleTimeout)
		defer cancel()
	}
	switch r.Action {
	case idem.ActionAck:
		d.endKeepAlive()
		r.BrokerErr = c.t.Ack(actx, d.msg)
	case idem.ActionRetry:
		d.endKeepAlive()
		r.BrokerErr = c.t.Retry(actx, d.msg, c.retryDelay(r.Delay))
	case idem.ActionDeadLetter:
		// Kept alive until the dead letter is durable (or has failed and
		// its back-off is waited out): the delivery stays ours meanwhile.
		h := DeadLetterHeaders(actx, c.g, d.im, d.res, d.err, r.Reason)
		r.Reason = h[idem.HeaderReason]
		err := c.t.DeadLetter(actx, d.msg, DeadLetter{Reason: r.Reason, Headers: h, Attempt: d.d.Attempt})
		if err != nil {
			// Not settled: the delivery comes back and is dead-lettered
			// again once the dead-letter destination takes it.
			r.BrokerErr = fmt.Errorf("broker: dead letter (%s): %w", r.Reason, err)
			r.Delay = c.opts.Backoff(d.d.Attempt)
			c.reportErr(r.BrokerErr)
			if !c.delays {
				r.Delay = waitOut(r.Delay, stop, d.ctx)
			}
			d.endKeepAlive()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(d.ctx), settleTimeout)
			if rerr := c.t.Retry(rctx, d.msg, c.retryDelay(r.Delay)); rerr != nil {
				r.BrokerErr = fmt.Errorf("%w; retry: %w", r.BrokerErr, rerr)
			}
			rcancel()
			break
		}
		d.endKeepAlive()
		hooks.CallOnDeadLetter(d.ctx, d.msg, r)
	}
	if r.BrokerErr != nil && r.Action != idem.ActionDeadLetter {
		c.reportErr(fmt.Errorf("broker: %s: %w", r.Action, r.BrokerErr))
	}
	if d.cancel != nil {
		d.cancel(nil)
	}
	hooks.CallAfterSettle(d.ctx, d.msg, r)
	return r
}

// waitOut waits out a retry's delay for a transport that cannot delay,
// until stop closes or the delivery's context ends, and returns how long it
// waited: the delay the retry really had, which the report then gives
// (none when a shutdown hands it back at once). ctx's Done channel is asked
// for only when there is a delay to wait (some contexts make it on first
// use: Watermill's message context).
func waitOut(delay time.Duration, stop <-chan struct{}, ctx context.Context) time.Duration {
	if isClosed(stop) || delay <= 0 {
		return 0
	}
	start := time.Now()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return delay
	case <-stop:
	case <-ctx.Done():
	}
	return time.Since(start)
}

// retryDelay is the delay handed to Retry: none when the transport does
// not delay (the engine waited it out).
func (c *Consumer[M]) retryDelay(delay time.Duration) time.Duration {
	if !c.delays {
		return 0
	}
	return delay
}

// keepAlive keeps one delivery alive: the transport's KeepAlive every
// period, from a timer, unless the guard's heartbeat renewed it since
// (renew, handed to it as the delivery's idem.ContextWithRenewal function);
// a lost lock cancels its delivery's context (lost) with the
// transport's error. A timer rather than a goroutine with a ticker: most
// deliveries are settled long before the first tick, and a goroutine
// started and joined per delivery cost a consumer about 4% of its CPU.
type keepAlive[M any] struct {
	c     *Consumer[M]
	msg   M
	every time.Duration
	lost  context.CancelCauseFunc
	ctx   context.Context // the delivery's
	last  atomic.Int64    // when KeepAlive last succeeded (UnixNano); 0: never

	mu      sync.Mutex // held while a tick runs, so stop waits for it
	stopped bool
	t       *time.Timer
}

// start arms the timer; the function returned stops it.
func (k *keepAlive[M]) start(ctx context.Context) (stop func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ctx = ctx
	k.t = time.AfterFunc(k.every, k.tick)
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.stopped = true
		k.t.Stop()
	}
}

func (k *keepAlive[M]) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	if last := k.last.Load(); last != 0 {
		if since := time.Since(time.Unix(0, last)); since < k.every {
			k.t.Reset(k.every - since) // the heartbeat renewed it
			return
		}
	}
	kctx, cancel := context.WithTimeout(k.ctx, k.every)
	err := k.renew(kctx)
	cancel()
	if err != nil {
		return
	}
	k.t.Reset(k.every)
}

// renew calls KeepAlive once. A lost lock cancels the delivery and is
// returned; other failures only risk a redelivery, which the record turns
// into a retry or a duplicate: they are reported, and nil returned.
func (k *keepAlive[M]) renew(ctx context.Context) error {
	err := k.c.ka.KeepAlive(ctx, k.msg)
	switch {
	case err == nil:
		k.last.Store(time.Now().UnixNano())
	case errors.Is(err, ErrLockLost):
		k.lost(err)
		return err
	case k.ctx.Err() == nil:
		k.c.reportErr(fmt.Errorf("broker: keep-alive: %w", err))
	}
	return nil
}

// OutageError is what Hooks.OnError receives while the store cannot be
// reached: the latest store error and how many claims met it since the
// previous report. It is reported at most once per OutageReportEvery, so a
// store error loop is never silent and never floods the hook.
type OutageError struct {
	Err  error
	Held int // claims that met the outage since the last report
}

// OutageReportEvery is how often, at most, an OutageError is reported.
const OutageReportEvery = 10 * time.Second

func (e *OutageError) Error() string {
	return fmt.Sprintf("broker: store unreachable, deliveries held without spending a broker delivery (%d claims since the last report): %v", e.Held, e.Err)
}

func (e *OutageError) Unwrap() error { return e.Err }

type outageReporter struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

func (o *outageReporter) report(onError func(error), err error) {
	o.mu.Lock()
	o.n++
	if !o.last.IsZero() && time.Since(o.last) < OutageReportEvery {
		o.mu.Unlock()
		return
	}
	n := o.n
	o.n, o.last = 0, time.Now()
	o.mu.Unlock()
	if onError != nil {
		onError(&OutageError{Err: err, Held: n})
	}
}
