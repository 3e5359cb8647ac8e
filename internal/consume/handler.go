// Package consume holds the handler plumbing shared by the broker
// integrations that take a sealed Handler (broker/nats, broker/amqp): each
// broker instantiates it with its own message type M and re-exports it
// under its own name and doc comments.
//
//	type Handler = consume.Handler[jetstream.Msg]
//
//	func Handle(fn func(context.Context, jetstream.Msg) ([]byte, error)) Handler {
//		return consume.Handle(fn)
//	}
//
// The consumer then checks the handler once at construction (Check) and runs
// it for each message (Run), or through a Driver, which holds a message
// whose key is in progress elsewhere and claims it again instead of
// handing it back to the broker (spending none of its delivery limit).
// DeadLetterHeaders gives the idem headers of a dead letter.
package consume

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
)

// Handler is the work a broker consumer runs for each message of type M
// under the guard. Its methods are unexported so that only Handle and
// HandleTx build one: the brokers' users cannot implement it, and the
// brokers drive it through Run and Check.
type Handler[M any] interface {
	run(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error)
	check(g *idem.Guard) error
}

// Run runs h for msg, whose guard view is im.
func Run[M any](ctx context.Context, h Handler[M], g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
	return h.run(ctx, g, im, msg)
}

// Check reports whether h can run under g: a HandleTx handler needs a store
// implementing idem.TxStore for its Tx. Consumers call it at construction.
func Check[M any](h Handler[M], g *idem.Guard) error {
	return h.check(g)
}

type handlerFunc[M any] func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error)

func (f handlerFunc[M]) run(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
	return f(ctx, g, im, msg)
}

func (handlerFunc[M]) check(*idem.Guard) error { return nil }

type txHandler[Tx, M any] struct{ handlerFunc[M] }

// check refuses, at construction, a guard whose store cannot run Tx
// transactions: every message would otherwise fail with idem.ErrNoTx.
func (txHandler[Tx, M]) check(g *idem.Guard) error {
	if _, ok := g.Store().(idem.TxStore[Tx]); !ok {
		var zero Tx
		return fmt.Errorf("%w: %w: store %T has none for %T", idem.ErrInvalidOptions, idem.ErrNoTx, g.Store(), zero)
	}
	return nil
}

// Handle runs fn in two-phase mode (idem.Guard.Do). Handle(nil) is nil.
func Handle[M any](fn func(ctx context.Context, msg M) ([]byte, error)) Handler[M] {
	if fn == nil {
		return nil
	}
	return handlerFunc[M](func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
		return g.Do(ctx, im, func(ctx context.Context) ([]byte, error) { return fn(ctx, msg) })
	})
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx). HandleTx(nil) is nil.
func HandleTx[Tx, M any](fn func(ctx context.Context, tx Tx, msg M) ([]byte, error)) Handler[M] {
	if fn == nil {
		return nil
	}
	return txHandler[Tx, M]{func(ctx context.Context, g *idem.Guard, im idem.Message, msg M) (idem.Result, error) {
		return idem.DoTx(ctx, g, im, func(ctx context.Context, tx Tx) ([]byte, error) { return fn(ctx, tx, msg) })
	}}
}
