package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Handler is the work a Consumer runs for each record. Build one with
// Handle (two-phase record), HandleTx (transactional inbox) or
// HandleCheckpoint (the partition's position in the business transaction);
// NewConsumer checks it once against the guard. The zero Handler is
// refused.
//
// Handle and HandleTx are broker.Handle and broker.HandleTx, as in every
// idem broker adapter; HandleCheckpoint is Kafka's own, since it needs a
// partitioned log whose consumer can seek.
type Handler struct {
	h  broker.Handler[*kgo.Record] // Handle, HandleTx
	cp checkpointer                // HandleCheckpoint; nil otherwise
}

// Handle runs fn in two-phase mode (idem.Guard.Do): the record's key is
// claimed with a lease, fn runs, and the record is completed with fn's
// result, which is replayed to duplicates (it may be nil). fn's context
// carries the key (idem.KeyFromContext, idem.DeriveKey for downstream
// calls) and is cancelled if the partition is lost or its drain times out.
// Wrap an error with idem.Permanent to dead-letter the record instead of
// retrying it. Handle(nil) is refused by NewConsumer.
//
// With a store that claims many keys in one round trip (an
// storekit.BatchStore), the consumer claims a partition's queued records
// together (Options.MaxClaimBatch); fn still runs for one record at a
// time, in offset order.
func Handle(fn func(ctx context.Context, rec *kgo.Record) ([]byte, error)) Handler {
	return Handler{h: broker.Handle(fn)}
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx, the transactional inbox): the business
// writes made through tx and the marker commit together, or neither does,
// and the offset becomes committable only after that commit. The guard's
// store must implement idem.TxStore[Tx] (store/postgres for pgx.Tx,
// store/sqlite and store/mysql for *sql.Tx): NewConsumer refuses one that
// does not with an error wrapping idem.ErrNoTx. The marker is written in
// the record's own transaction, so records are claimed one by one.
// HandleTx(nil) is refused by NewConsumer.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, rec *kgo.Record) ([]byte, error)) Handler {
	return Handler{h: broker.HandleTx(fn)}
}

// check reports whether h can run under g (see broker.Handler.Check).
func (h Handler) check(g *idem.Guard) error {
	if h.cp != nil {
		return h.cp.check(g)
	}
	return h.h.Check(g)
}

// engine is the handler as the consumer engine runs it: a checkpoint
// handler is an adapter's own mode (broker.HandleRun).
func (h Handler) engine() broker.Handler[*kgo.Record] {
	if h.cp == nil {
		return h.h
	}
	cp := h.cp
	return broker.HandleRun(func(ctx context.Context, g *idem.Guard, _ idem.Message, rec *kgo.Record) (idem.Result, error) {
		return cp.run(ctx, g, rec)
	}, cp.check)
}
