package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
)

// Handler is the work a consumer runs for each delivery of type M (a
// *kgo.Record, a jetstream.Msg, an amqp.Delivery) under a guard. Build one
// with Handle or HandleTx; adapters run it with Run after checking it once
// with Check.
type Handler[M any] struct {
	run   func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error)
	check func(g *idem.Guard) error
	fn    func(ctx context.Context, msg M) ([]byte, error) // Handle's function; nil for HandleTx
}

// ErrNoHandler is returned by Check for a zero Handler (or Handle(nil)).
var ErrNoHandler = errors.New("broker: no handler (use Handle or HandleTx)")

// Handle runs fn in two-phase mode (idem.Guard.Do): for side effects outside
// the database. Its result is recorded and replayed to duplicates.
func Handle[M any](fn func(ctx context.Context, msg M) ([]byte, error)) Handler[M] {
	if fn == nil {
		return Handler[M]{}
	}
	return Handler[M]{fn: fn, run: func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
		return g.Do(ctx, im, func(ctx context.Context) ([]byte, error) { return fn(ctx, msg) })
	}}
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx, the transactional inbox): fn's writes on tx
// and the marker commit together or not at all.
func HandleTx[Tx, M any](fn func(ctx context.Context, tx Tx, msg M) ([]byte, error)) Handler[M] {
	if fn == nil {
		return Handler[M]{}
	}
	return Handler[M]{
		run: func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
			return idem.DoTx(ctx, g, im, func(ctx context.Context, tx Tx) ([]byte, error) { return fn(ctx, tx, msg) })
		},
		check: idem.CheckTx[Tx],
	}
}

// HandleRun is a handler of an adapter's own mode (Kafka's checkpoints):
// run is called for each delivery under the guard, and check, when not
// nil, once by NewEngine (its error is wrapped in
// idem.ErrInvalidOptions). Users build handlers with Handle and HandleTx,
// or with the adapter's own constructors.
func HandleRun[M any](run func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error), check func(g *idem.Guard) error) Handler[M] {
	if run == nil {
		return Handler[M]{}
	}
	return Handler[M]{run: run, check: check}
}

// TwoPhase reports whether h was built by Handle: its claims can be made
// ahead (RunTicket), and its record counts the handler's attempts.
func (h Handler[M]) TwoPhase() bool { return h.fn != nil }

// Check reports whether h can run under g: a built handler, and for HandleTx
// a guard whose store has transactions of its type. Adapters call it in
// their constructor, so a mismatch fails there rather than on every
// message. The error wraps idem.ErrInvalidOptions.
func (h Handler[M]) Check(g *idem.Guard) error {
	if h.run == nil {
		return fmt.Errorf("%w: %w", idem.ErrInvalidOptions, ErrNoHandler)
	}
	if g == nil {
		return fmt.Errorf("%w: nil guard", idem.ErrInvalidOptions)
	}
	if h.check != nil {
		if err := h.check(g); err != nil {
			return fmt.Errorf("%w: %w", idem.ErrInvalidOptions, err)
		}
	}
	return nil
}

// Run runs h for msg, whose guard view is im (the adapter's MessageOf).
func (h Handler[M]) Run(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
	return h.run(ctx, g, im, msg)
}

// RunTicket runs a Handle handler for msg under a claim made ahead in a
// batch (idem.Guard.ClaimBatch), so that adapters claiming a partition's
// queued records in one round trip run each under its ticket. ok is false,
// and nothing runs, for a HandleTx handler: the inbox marker is written in
// the handler's own transaction, so it cannot be claimed ahead.
func (h Handler[M]) RunTicket(ctx context.Context, t *idem.Ticket, msg M) (res idem.Result, err error, ok bool) {
	if h.fn == nil {
		return idem.Result{}, nil, false
	}
	res, err = t.Do(ctx, func(ctx context.Context) ([]byte, error) { return h.fn(ctx, msg) })
	return res, err, true
}
