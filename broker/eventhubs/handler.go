package eventhubs

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem/broker"
)

// Handler is the work a Consumer runs for each event under the guard.
// Build one with Handle (two-phase record) or HandleTx (transactional
// inbox); NewConsumer checks it once against the guard.
type Handler = broker.Handler[*azeventhubs.ReceivedEventData]

// Handle runs fn in two-phase mode (idem.Guard.Do): the key is claimed
// with a lease, fn runs, and the record is completed with fn's result,
// which is replayed to duplicates (it may be nil). fn's context carries
// the key (idem.KeyFromContext, idem.DeriveKey for downstream calls).
// Wrap an error with idem.Permanent to dead-letter the event instead of
// retrying it. Handle(nil) is refused by NewConsumer.
func Handle(fn func(ctx context.Context, ev *azeventhubs.ReceivedEventData) ([]byte, error)) Handler {
	return broker.Handle(fn)
}

// HandleTx runs fn inside a transaction of the guard's store together
// with the dedup marker (idem.DoTx, the transactional inbox): the
// business writes made through tx and the marker commit together, or
// neither does. The guard's store must implement idem.TxStore[Tx]
// (store/sqlite and store/mysql for *sql.Tx, store/postgres for pgx.Tx):
// NewConsumer refuses one that does not with an error wrapping
// idem.ErrNoTx.
func HandleTx[Tx any](fn func(ctx context.Context, tx Tx, ev *azeventhubs.ReceivedEventData) ([]byte, error)) Handler {
	return broker.HandleTx(fn)
}
