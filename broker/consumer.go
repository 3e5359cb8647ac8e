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

// Consumer schedules the deliveries a Transport receives on a Processor:
// it holds the concurrency slots, runs the receive loop, frees a worker
// while its delivery waits on a key in progress elsewhere, and shuts down
// gracefully. What happens to each delivery is the Processor's.
type Consumer[M any] struct {
	t Transport[M]
	p *Processor[M]
}

// NewConsumer returns a consumer of what t receives, running h under g:
// NewEngine(g, h, opts) and its Consumer(t). Everything is checked once,
// here: a nil transport or guard, a zero handler, a HandleTx handler whose
// Tx the guard's store has no transactions for, and negative options are
// refused with an error wrapping idem.ErrInvalidOptions.
func NewConsumer[M any](t Transport[M], g *idem.Guard, h Handler[M], opts Options[M]) (*Consumer[M], error) {
	if t == nil {
		return nil, fmt.Errorf("%w: broker: nil transport", idem.ErrInvalidOptions)
	}
	e, err := NewEngine(g, h, opts)
	if err != nil {
		return nil, err
	}
	return e.Consumer(t), nil
}

// Guard is the consumer's guard.
func (c *Consumer[M]) Guard() *idem.Guard { return c.p.e.g }

// Options are the consumer's options, defaults filled.
func (c *Consumer[M]) Options() Options[M] { return c.p.e.opts }

// Processor is the processor the consumer runs each delivery on.
func (c *Consumer[M]) Processor() *Processor[M] { return c.p }

// Process is c.Processor().Process: for programs that run their own
// receive loop, one delivery handled and settled as Run would.
func (c *Consumer[M]) Process(ctx context.Context, msg M) Report { return c.p.Process(ctx, msg) }

// ProcessUntil is c.Processor().ProcessUntil.
//
// Deprecated: adapters that schedule deliveries themselves use a
// Processor (Engine.Processor, NewProcessor).
func (c *Consumer[M]) ProcessUntil(ctx context.Context, stop <-chan struct{}, msg M) Report {
	return c.p.ProcessUntil(ctx, stop, msg)
}

// ReportError reports err, an error the consumer's adapter handled by
// itself and goes on from, as Engine.ReportError does.
func (c *Consumer[M]) ReportError(err error) { c.p.e.obs.reportError(err) }

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
	opts := &c.p.e.opts
	// stop closes when receiving ends (ctx ended or the transport closed);
	// handlers outlive it so that a shutdown finishes them, and work ends
	// ShutdownTimeout after it.
	stopCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	stop := stopCtx.Done()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	r := &run[M]{p: c.p, stop: stop, work: work,
		slots: make(chan struct{}, opts.Concurrency),
		again: make(chan *delivery[M])}

	// One delivery at a time (Concurrency 1, the default): Run handles
	// each delivery itself, on the goroutine that receives. It could
	// receive nothing while a worker handled one anyway (the one slot is
	// taken), and the hand-over to a worker and back was two goroutine
	// switches a delivery. A delivery held in progress elsewhere waits
	// apart and is claimed again by a worker (Run may be in Receive then),
	// so the first such hold starts the one worker, which handles every
	// delivery from then on.
	//
	// So that a shutdown is as prompt as with workers while a handler
	// runs on Run's goroutine, what Run does once ctx ends runs as ctx
	// ends: the count to ShutdownTimeout starts, and what a Drainer
	// buffered is given back, unless Run is in Receive (it then drains as
	// Receive returns).
	var spare *delivery[M] // the inline deliveries'
	if opts.Concurrency == 1 {
		var late atomic.Pointer[time.Timer]
		shutdown := context.AfterFunc(ctx, func() {
			late.Store(time.AfterFunc(opts.ShutdownTimeout, cancelWork))
			r.drainUnlessReceiving()
		})
		defer func() {
			if !shutdown() {
				if t := late.Load(); t != nil {
					t.Stop()
				}
			}
		}()
	} else {
		r.startWorkers(opts.Concurrency)
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
		for n < opts.Concurrency {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		if !r.receiving(true) {
			for range n {
				<-r.slots
			}
			break // ctx ended, and what the Drainer held was given back
		}
		msgs, err := c.t.Receive(ctx, n)
		r.receiving(false)
		for range n - min(len(msgs), n) {
			<-r.slots
		}
		for _, m := range msgs[:min(len(msgs), n)] {
			if r.queue == nil {
				spare = r.deliver(m, spare)
				continue
			}
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
			c.p.reportErr(err)
			sleep(opts.Backoff(1), stop)
		}
	}
	stopRun()
	if r.queue != nil {
		close(r.queue)
	}
	r.drainOnce()
	t := time.AfterFunc(opts.ShutdownTimeout, cancelWork)
	r.wg.Wait()
	t.Stop()
	return runErr
}

// run is one Run's state.
type run[M any] struct {
	p     *Processor[M]
	stop  <-chan struct{}   // closed when receiving ends
	work  context.Context   // handlers' parent: ends ShutdownTimeout after stop
	slots chan struct{}     // a slot per delivery received and not yet handled
	queue chan M            // received, waiting for a worker (nil inline: Concurrency 1)
	again chan *delivery[M] // held in progress elsewhere, to be claimed again
	wg    sync.WaitGroup

	mu      sync.Mutex // Run in Receive, and the Drainer drained
	inRecv  bool
	drained bool
}

// startWorkers starts n workers and their queue. A fixed pool of workers:
// their stacks stay grown, where a goroutine per delivery would grow a
// fresh stack through the guard each time.
func (r *run[M]) startWorkers(n int) {
	r.queue = make(chan M, cap(r.slots))
	for range n {
		r.wg.Add(1)
		go r.worker()
	}
}

// receiving marks Run as in Receive (on) or out of it. Turning it on
// fails once the Drainer was drained: receiving has ended.
func (r *run[M]) receiving(on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on && r.drained {
		return false
	}
	r.inRecv = on
	return true
}

// drainUnlessReceiving drains the Drainer as ctx ends, unless Run is in
// Receive: a Drainer is never drained while it receives, and Run drains
// it itself once Receive returns.
func (r *run[M]) drainUnlessReceiving() {
	r.mu.Lock()
	if r.inRecv || r.drained {
		r.mu.Unlock()
		return
	}
	r.drained = true
	r.wg.Add(1) // before Run can wait: it drains (or waits) under mu first
	r.mu.Unlock()
	defer r.wg.Done()
	r.drain()
}

// drainOnce drains the Drainer unless that was done as ctx ended.
func (r *run[M]) drainOnce() {
	r.mu.Lock()
	done := r.drained
	r.drained = true
	r.mu.Unlock()
	if !done {
		r.drain()
	}
}

// drain gives back what the transport's Drainer buffered, received but
// not started (a last allowed delivery among it is handled instead).
func (r *run[M]) drain() {
	dr := r.p.caps.drainer
	if dr == nil {
		return
	}
	dctx, cancel := context.WithTimeout(r.work, settleTimeout)
	defer cancel()
	for _, m := range dr.Drain(dctx) {
		r.giveBack(m)
	}
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
			spare = r.deliver(m, spare)
		case d := <-r.again:
			if r.handle(d) {
				spare = d
			}
		}
	}
}

// deliver handles m, received with a slot taken for it, and frees the
// slot. It returns the delivery to reuse for the next one: d, or the one
// m was handled in when it was settled here (a worker's, or Run's inline).
func (r *run[M]) deliver(m M, spare *delivery[M]) *delivery[M] {
	if isClosed(r.stop) {
		// Shutdown began as m was received: it goes back unstarted.
		r.giveBack(m)
		<-r.slots
		return spare
	}
	d := spare
	if d == nil {
		d = new(delivery[M])
	}
	r.p.begin(d, r.work, m)
	if !r.handle(d) {
		d = nil // another goroutine's now
	}
	<-r.slots
	return d
}

// handle claims d until it is settled or held in progress elsewhere; a
// held delivery waits in a goroutine of its own, freeing the worker.
//
// A delivery held for a store outage waits on its worker, keeping its
// slot: while the store is down no more deliveries are received, only
// those in hand are kept alive. settled reports that d was settled here,
// not handed to another goroutine.
func (r *run[M]) handle(d *delivery[M]) (settled bool) {
	for {
		wait, held := r.p.claim(d, r.stop)
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
			r.wg.Add(1) // the calling worker (or Run) is still counted: never from zero
			if r.queue == nil {
				// On Run's goroutine, handling inline (Concurrency 1): d
				// comes back on again, which a worker takes, since Run
				// may be in Receive then. The one worker handles every
				// delivery from now on.
				r.startWorkers(1)
			}
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
			if wait, held := r.p.claim(d, nil); held {
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
	rep := r.p.decide(d)
	if r.p.waitsToSettle(d, rep) {
		r.wg.Add(1)
		go r.settleApart(d, rep)
		return false
	}
	r.p.settle(d, rep, r.stop)
	return true
}

// settleApart is finish's settle in a goroutine of its own. A method, not
// a closure: a closure's capture of the report moved it to the heap on
// every delivery, this one goroutine's or not.
func (r *run[M]) settleApart(d *delivery[M], rep Report) {
	defer r.wg.Done()
	r.p.settle(d, rep, r.stop)
}

// giveBack hands m back unhandled (Returner, else a Retry with no delay),
// unless it is the broker's last allowed delivery: handed back, it would
// be dropped (JetStream) or dead-lettered without idem's headers (Service
// Bus), so it is handled as one in flight (held until ShutdownTimeout at
// most), outside the workers, which may be gone.
func (r *run[M]) giveBack(m M) {
	if r.p.t.Delivery(m).Last {
		r.wg.Add(1) // from Run before its Wait, or from a counted worker
		go func() {
			defer r.wg.Done()
			r.p.Process(r.work, m)
		}()
		return
	}
	ctx, cancel := context.WithTimeout(r.work, settleTimeout)
	defer cancel()
	var err error
	if ret := r.p.caps.returner; ret != nil {
		err = ret.Return(ctx, m)
	} else {
		err = r.p.t.Retry(ctx, m, 0)
	}
	if err != nil {
		r.p.reportErr(fmt.Errorf("broker: give back on shutdown: %w", err))
	}
}
