package natsidem

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler is the work a Consumer runs for each message under the guard.
// Build one with Handle (two-phase record) or HandleTx (transactional inbox).
type Handler interface {
	run(ctx context.Context, g *idem.Guard, im idem.Message, msg jetstream.Msg) (idem.Result, error)
	check(g *idem.Guard) error
}

type handlerFunc func(ctx context.Context, g *idem.Guard, im idem.Message, msg jetstream.Msg) (idem.Result, error)

func (f handlerFunc) run(ctx context.Context, g *idem.Guard, im idem.Message, msg jetstream.Msg) (idem.Result, error) {
	return f(ctx, g, im, msg)
}

func (f handlerFunc) check(*idem.Guard) error { return nil }

type txHandler[Tx any] struct{ handlerFunc }

// check refuses, at construction, a guard whose store cannot run Tx
// transactions: every message would otherwise fail with idem.ErrNoTx.
func (txHandler[Tx]) check(g *idem.Guard) error {
	if _, ok := g.Store().(idem.TxStore[Tx]); !ok {
		var zero Tx
		return fmt.Errorf("%w: %w: store %T has none for %T", idem.ErrInvalidOptions, idem.ErrNoTx, g.Store(), zero)
	}
	return nil
}

// Handle runs fn in two-phase mode (idem.Guard.Do): the key is claimed with
// a lease, fn runs, and the record is completed with fn's result, which is
// replayed to duplicates. fn's context carries the key (idem.DeriveKey) and is
// cancelled if another owner takes the key over. Handle(nil) is nil.
func Handle(fn func(ctx context.Context, msg jetstream.Msg) ([]byte, error)) Handler {
	if fn == nil {
		return nil
	}
	return handlerFunc(func(ctx context.Context, g *idem.Guard, im idem.Message, msg jetstream.Msg) (idem.Result, error) {
		return g.Do(ctx, im, func(ctx context.Context) ([]byte, error) { return fn(ctx, msg) })
	})
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx): the business writes made through tx and the
// marker commit together, or neither does. The guard's store must implement
// idem.TxStore[Tx] (store/sqlite for *sql.Tx, store/postgres for pgx.Tx):
// NewConsumer refuses one that does not with an error wrapping idem.ErrNoTx.
// HandleTx(nil) is nil.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, msg jetstream.Msg) ([]byte, error)) Handler {
	if fn == nil {
		return nil
	}
	return txHandler[Tx]{func(ctx context.Context, g *idem.Guard, im idem.Message, msg jetstream.Msg) (idem.Result, error) {
		return idem.DoTx(ctx, g, im, func(ctx context.Context, tx Tx) ([]byte, error) { return fn(ctx, tx, msg) })
	}}
}
