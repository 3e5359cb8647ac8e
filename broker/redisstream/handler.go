package redisstream

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Handle runs fn in two-phase mode (idem.Guard.Do): the key is claimed with
// a lease, fn runs, and the record is completed with fn's result, which is
// replayed to duplicates (it may be nil). fn's context carries the key
// (idem.KeyFromContext, idem.DeriveKey for downstream calls) and is
// cancelled if another owner takes the key over, or another consumer of
// the group claims the entry (cause broker.ErrLockLost). Wrap an error
// with idem.Permanent to dead-letter the entry instead of retrying it. fn
// must not XACK the entry: the Consumer does, after the record is durable.
// Handle(nil) is refused by NewConsumer.
func Handle(fn func(ctx context.Context, m *Message) ([]byte, error)) Handler {
	return broker.Handle(fn)
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx, the transactional inbox): the business
// writes made through tx and the marker commit together, or neither does.
// The guard's store must implement idem.TxStore[Tx] (store/sqlite and
// store/mysql for *sql.Tx, store/postgres for pgx.Tx): NewConsumer refuses
// one that does not with an error wrapping idem.ErrNoTx. HandleTx(nil) is
// refused by NewConsumer.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, m *Message) ([]byte, error)) Handler {
	return broker.HandleTx(fn)
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, rdb redis.UniversalClient, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(rdb, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
