package broker

import (
	"context"
	"time"

	"github.com/idemgo/idem"
)

// Engine is one consumer's guard, handler and options, checked once, and
// what its processors share (the rate of store-outage reports). It makes a
// Processor for each Settler and a Consumer for a Transport: adapters that
// schedule deliveries themselves and settle them per unit (a Kafka
// partition, a Service Bus session, an SQS FIFO group) keep one Engine and
// make a Processor per unit.
type Engine[M any] struct {
	g      *idem.Guard
	h      Handler[M]
	opts   Options[M]
	clock  func() time.Time // the guard's, read once (Guard.Options copies them all)
	outage outageReporter
	obs    observers
}

// observers are what the engine reports to: the interfaces the guard's
// observer implements, read once, and the deprecated Hooks.OnError.
type observers struct {
	scope   string
	settle  idem.SettlementObserver
	errs    idem.ErrorObserver
	outage  idem.OutageObserver
	onError func(error)
}

func observersOf(g *idem.Guard, onError func(error)) observers {
	o := g.Options().Observer
	obs := observers{scope: g.Options().Scope, onError: onError}
	obs.settle, _ = o.(idem.SettlementObserver)
	obs.errs, _ = o.(idem.ErrorObserver)
	obs.outage, _ = o.(idem.OutageObserver)
	return obs
}

// reportError reports err, handled by the engine or its adapter, to the
// guard's observer (idem.ErrorObserver) and Hooks.OnError.
func (o *observers) reportError(err error) {
	if err == nil {
		return
	}
	if o.errs != nil {
		o.errs.ObserveError(context.Background(), idem.HandledError{Component: "broker", Scope: o.scope, Err: err})
	}
	if o.onError != nil {
		o.onError(err)
	}
}

// NewEngine checks h under g and opts once: a zero handler, a nil guard, a
// HandleTx handler whose Tx the guard's store has no transactions for, and
// negative options are refused with an error wrapping
// idem.ErrInvalidOptions. Options' defaults are filled.
func NewEngine[M any](g *idem.Guard, h Handler[M], opts Options[M]) (*Engine[M], error) {
	if err := h.Check(g); err != nil {
		return nil, err
	}
	if err := opts.Fill(); err != nil {
		return nil, err
	}
	return &Engine[M]{g: g, h: h, opts: opts, clock: g.Options().Clock, obs: observersOf(g, opts.Hooks.OnError)}, nil
}

// ReportError reports err, an error the engine's adapter handled by itself
// and goes on from (a fetch, a commit, a reconnection), to the guard's
// observer (idem.ErrorObserver) and to Hooks.OnError. A nil err is not
// reported.
func (e *Engine[M]) ReportError(err error) { e.obs.reportError(err) }

// Guard is the engine's guard.
func (e *Engine[M]) Guard() *idem.Guard { return e.g }

// Options are the engine's options, defaults filled.
func (e *Engine[M]) Options() Options[M] { return e.opts }

// Processor returns the processor of the deliveries t settles. t must not
// be nil.
func (e *Engine[M]) Processor(t Settler[M]) *Processor[M] {
	if t == nil {
		panic("broker: nil settler")
	}
	return &Processor[M]{e: e, t: t, caps: capabilitiesOf[M](t)}
}

// Consumer returns the consumer of what t receives, on e's Processor of t.
// t must not be nil.
func (e *Engine[M]) Consumer(t Transport[M]) *Consumer[M] {
	return &Consumer[M]{t: t, p: e.Processor(t)}
}
