package natsidem

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/consume"
)

// Handler is the work a Consumer runs for each message under the guard.
// Build one with Handle (two-phase record) or HandleTx (transactional inbox).
type Handler = consume.Handler[jetstream.Msg]

// Handle runs fn in two-phase mode (idem.Guard.Do): the key is claimed with
// a lease, fn runs, and the record is completed with fn's result, which is
// replayed to duplicates. fn's context carries the key (idem.DeriveKey) and is
// cancelled if another owner takes the key over. Handle(nil) is nil.
func Handle(fn func(ctx context.Context, msg jetstream.Msg) ([]byte, error)) Handler {
	return consume.Handle(fn)
}

// HandleTx runs fn inside a transaction of the guard's store together with
// the dedup marker (idem.DoTx): the business writes made through tx and the
// marker commit together, or neither does. The guard's store must implement
// idem.TxStore[Tx] (store/sqlite for *sql.Tx, store/postgres for pgx.Tx):
// NewConsumer refuses one that does not with an error wrapping idem.ErrNoTx.
// HandleTx(nil) is nil.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, msg jetstream.Msg) ([]byte, error)) Handler {
	return consume.HandleTx(fn)
}
