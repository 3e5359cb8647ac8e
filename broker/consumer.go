package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// Consumer is the engine: it runs a Handler for every delivery a Transport
// receives, under a guard, and settles each. It is the one place of the
// consumer flow; adapters build one over their transport (see the package
// doc).
type Consumer[M any] struct {
	t      Transport[M]
	g      *idem.Guard
	h      Handler[M]
	opts   Options[M]
	ka     KeepAliver[M]
	delays bool
	local  bool // InPlace: Ack and Retry need no settle context
	ret    Returner[M]
	runner Runner[M]
	outage outageReporter
}

// NewConsumer returns the engine over t running h under g. Everything is
// checked once, here: a nil transport or guard, a zero handler, a HandleTx
// handler whose Tx the guard's store has no transactions for, and negative
// options are refused with an error wrapping idem.ErrInvalidOptions.
func NewConsumer[M any](t Transport[M], g *idem.Guard, h Handler[M], opts Options[M]) (*Consumer[M], error) {
	if t == nil {
		return nil, fmt.Errorf("%w: broker: nil transport", idem.ErrInvalidOptions)
	}
	if err := h.Check(g); err != nil {
		return nil, err
	}
	if err := opts.Fill(); err != nil {
		return nil, err
	}
	c := &Consumer[M]{t: t, g: g, h: h, opts: opts, delays: true}
	c.ka, _ = t.(KeepAliver[M])
	if d, ok := t.(Delayer); ok {
		c.delays = d.RetryDelays()
	}
	if ip, ok := t.(InPlace); ok {
		c.local = ip.SettlesInPlace()
	}
	c.ret, _ = t.(Returner[M])
	c.runner, _ = t.(Runner[M])
	return c, nil
}

// Guard is the consumer's guard.
func (c *Consumer[M]) Guard() *idem.Guard { return c.g }

// Options are the consumer's options, defaults filled.
func (c *Consumer[M]) Options() Options[M] { return c.opts }

// settleTimeout bounds an ack, a retry or a dead letter when the handler's
// context has ended (shutdown): the outcome is known and should reach the
// broker.
const settleTimeout = 10 * time.Second

// Run receives and handles deliveries until ctx ends, then shuts down
// gracefully: it stops receiving, gives back what was received but not
// started (and what a Drainer buffered; a last allowed delivery among them
// is handled instead), hands back held deliveries (with
// the delay until their holder's lease ends; one on its last allowed
// delivery is held on until ShutdownTimeout), waits for the in-flight
// handlers (cancelling their contexts after ShutdownTimeout) and returns
// nil. It returns the transport's error when Receive fails with ErrClosed;
// in-flight handlers are finished first.
func (c *Consumer[M]) Run(ctx context.Context) error {
	// stop closes when receiving ends (ctx ended or the transport closed);
	// handlers outlive it so that a shutdown finishes them, and work ends
	// ShutdownTimeout after it.
	stopCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	stop := stopCtx.Done()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	r := &run[M]{c: c, stop: stop, work: work,
		slots: make(chan struct{}, c.opts.Concurrency),
		queue: make(chan M, c.opts.Concurrency),
		again: make(chan *delivery[M])}

	// A fixed pool of workers: their stacks stay grown, where a goroutine
	// per delivery would grow a fresh stack through the guard each time.
	for range c.opts.Concurrency {
		r.wg.Add(1)
		go r.worker()
	}
	var runErr error
	for runErr == nil {
		// Take the slots before receiving, so no delivery waits on a busy
		// worker (and its broker lock or ack deadline does not run down).
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		n := 1
	more:
		for n < c.opts.Concurrency {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		msgs, err := c.t.Receive(ctx, n)
		for range n - min(len(msgs), n) {
			<-r.slots
		}
		for _, m := range msgs[:min(len(msgs), n)] {
			r.queue <- m // never blocks: the slots bound the deliveries queued
		}
		for _, m := range msgs[min(len(msgs), n):] {
			r.giveBack(m) // a transport that returned more than asked
		}
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, ErrClosed):
			runErr = err
		default:
			c.reportErr(err)
			sleep(c.opts.Backoff(1), stop)
		}
	}
	stopRun()
	close(r.queue)
	if dr, ok := c.t.(Drainer[M]); ok {
		dctx, cancel := context.WithTimeout(work, settleTimeout)
		for _, m := range dr.Drain(dctx) {
			r.giveBack(m)
		}
		cancel()
	}
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelWork)
	r.wg.Wait()
	t.Stop()
	return runErr
}

// run is one Run's state.
type run[M any] struct {
	c     *Consumer[M]
	stop  <-chan struct{}   // closed when receiving ends
	work  context.Context   // handlers' parent: ends ShutdownTimeout after stop
	slots chan struct{}     // a slot per delivery received and not yet handled
	queue chan M            // received, waiting for a worker
	again chan *delivery[M] // held in progress elsewhere, to be claimed again
	wg    sync.WaitGroup
}

func (r *run[M]) worker() {
	defer r.wg.Done()
	// A delivery settled on this worker is held by nothing else (the
	// keep-alive holds its context, not it): the next one reuses it.
	var spare *delivery[M]
	for {
		select {
		case m, ok := <-r.queue:
			if !ok {
				return
			}
			if isClosed(r.stop) {
				// Shutdown began as m was received: it goes back unstarted.
				r.giveBack(m)
				<-r.slots
				continue
			}
			d := spare
			if d == nil {
				d = new(delivery[M])
			}
			spare = nil
			r.c.start(d, r.work, m)
			if r.claim(d) {
				spare = d
			}
			<-r.slots
		case d := <-r.again:
			if r.claim(d) {
				spare = d
			}
		}
	}
}

// claim claims d until it is settled or held in progress elsewhere; a
// held delivery waits in a goroutine of its own, freeing the worker.
//
// A delivery held for a store outage waits on its worker, keeping its
// slot: while the store is down no more deliveries are received, only
// those in hand are kept alive. settled reports that d was settled here,
// not handed to another goroutine.
func (r *run[M]) claim(d *delivery[M]) (settled bool) {
	for {
		wait, held := r.c.claim(d, r.stop)
		switch {
		case !held:
			return r.finish(d)
		case d.outage:
			until := r.stop
			if d.d.Last {
				until = d.ctx.Done() // never handed back: held until the handlers' context ends
			}
			if sleep(wait, until) {
				continue
			}
			return r.finish(d)
		default:
			r.wg.Add(1) // the calling worker is still counted: never from zero
			go r.hold(d, wait)
			return false
		}
	}
}

// hold waits out one round of d's hold and hands it to a worker again.
func (r *run[M]) hold(d *delivery[M], wait time.Duration) {
	defer r.wg.Done()
	until := time.Now().Add(wait)
	if sleep(wait, r.stop) {
		select {
		case r.again <- d:
			return
		case <-r.stop:
		}
	}
	// Shutting down: no worker claims it again. It is handed back now,
	// unless this is its last delivery: that is held on, and claimed here,
	// until the handlers' context ends.
	if d.d.Last {
		for sleep(time.Until(until), d.ctx.Done()) {
			if wait, held := r.c.claim(d, nil); held {
				until = time.Now().Add(wait)
				continue
			}
			break
		}
	}
	r.finish(d)
}

// finish settles d; a retry that the transport cannot delay waits in a
// goroutine of its own, kept alive. settled reports that d was settled
// here.
func (r *run[M]) finish(d *delivery[M]) (settled bool) {
	rep := r.c.decide(d)
	if rep.Action == idem.ActionRetry && !r.c.delays && rep.Delay > 0 && d.lockLost() == nil {
		r.wg.Add(1)
		go r.settleApart(d, rep)
		return false
	}
	r.c.settle(d, rep, r.stop)
	return true
}

// settleApart is finish's settle in a goroutine of its own. A method, not
// a closure: a closure's capture of the report moved it to the heap on
// every delivery, this one goroutine's or not.
func (r *run[M]) settleApart(d *delivery[M], rep Report) {
	defer r.wg.Done()
	r.c.settle(d, rep, r.stop)
}

// giveBack hands m back unhandled, unless it is the broker's last allowed
// delivery: handed back, it would be dropped (JetStream) or dead-lettered
// without idem's headers (Service Bus), so it is handled as one in flight
// (held until ShutdownTimeout at most), outside the workers, which may be
// gone.
func (r *run[M]) giveBack(m M) {
	if r.c.t.Delivery(m).Last {
		r.wg.Add(1) // from Run before its Wait, or from a counted worker
		go func() {
			defer r.wg.Done()
			r.c.Process(r.work, m)
		}()
		return
	}
	ctx, cancel := context.WithTimeout(r.work, settleTimeout)
	defer cancel()
	if err := r.c.giveBack(ctx, m); err != nil {
		r.c.reportErr(fmt.Errorf("broker: give back on shutdown: %w", err))
	}
}

func (c *Consumer[M]) giveBack(ctx context.Context, m M) error {
	if c.ret != nil {
		return c.ret.Return(ctx, m)
	}
	return c.t.Retry(ctx, m, 0)
}

// Process handles one delivery and settles it, with the hooks; Run calls
// the same flow for every delivery. It is for programs that run their own
// receive loop: call it once per delivery, from any goroutine. A delivery
// whose key is in progress elsewhere, or whose store cannot be reached, is
// held inline, so Process may block that long; when ctx ends it is handed
// back (a last delivery is dead-lettered rather than dropped).
func (c *Consumer[M]) Process(ctx context.Context, msg M) Report {
	return c.ProcessUntil(ctx, ctx.Done(), msg)
}

// ProcessUntil is Process with the end of the holds apart from the
// handler's context: a hold (in progress elsewhere, a store outage) ends
// when stop closes (a nil stop never does) or ctx ends, while a running
// handler is cut only by ctx. Transports that schedule deliveries
// themselves (Kafka's partitions, one record at a time in order) call it
// per delivery: stop is their graceful stop, ctx their hard one. A Retry
// report from a transport whose Retry is in place (it does not redeliver)
// is the transport's to wait out (Report.Delay) and process again.
func (c *Consumer[M]) ProcessUntil(ctx context.Context, stop <-chan struct{}, msg M) Report {
	var dv delivery[M]
	d := &dv
	c.start(d, ctx, msg)
	until := stop
	merged := false
	for {
		wait, held := c.claim(d, stop)
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
	return c.settle(d, c.decide(d), until)
}

// mergeDone is a channel that closes when either a or b does (nil when
// both are nil, a itself when b is nil, and the reverse).
func mergeDone(a, b <-chan struct{}) <-chan struct{} {
	switch {
	case a == nil:
		return b
	case b == nil, a == b:
		return a
	}
	select {
	case <-a:
		return a
	case <-b:
		return b
	default:
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		}
		close(done)
	}()
	return done
}

func (c *Consumer[M]) reportErr(err error) { c.opts.Hooks.CallOnError(err) }

// sleep waits for d and reports true, or reports false as soon as until is
// closed (at once if it is closed already). A nil until never closes.
func sleep(d time.Duration, until <-chan struct{}) bool {
	if isClosed(until) {
		return false
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-until:
		return false
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
