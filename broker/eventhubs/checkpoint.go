package eventhubs

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Checkpoints in the business database: HandleCheckpoint writes the
// partition's checkpoint in the transaction of the event's effects,
// through a CheckpointStore that takes the transaction (package
// broker/eventhubs/checkpointstore, a module of its own).

// ErrCheckpointBehind is returned (wrapped) by a transactional
// CheckpointStore's SetCheckpoint in HandleCheckpoint's transaction when
// the stored checkpoint is at or past the event already: the event was
// applied, and the transaction rolls back.
var ErrCheckpointBehind = errors.New("eventhubs: the checkpoint is at or past the event")

// ErrNoTxCheckpoints is returned for an event handled by HandleCheckpoint
// under a Processor whose CheckpointStore does not write in the
// transaction (TxCheckpoint): nothing is written, and the partition waits.
var ErrNoTxCheckpoints = errors.New("eventhubs: the Processor's CheckpointStore does not write checkpoints in HandleCheckpoint's transaction (use broker/eventhubs/checkpointstore)")

// TxCheckpoint is what HandleCheckpoint hands the Processor's
// CheckpointStore in SetCheckpoint's context (TxCheckpointFrom): the
// transaction of the event's effects, in which the store writes the
// checkpoint. SetCheckpoint's own context is already cancelled, so that a
// store that does not know TxCheckpoint (Azure Blob Storage's) writes
// nothing; the store writes with Ctx.
type TxCheckpoint struct {
	Tx      any             // the transaction: a pgx.Tx, a *sql.Tx
	Ctx     context.Context // the context to write with
	written bool
}

// Written tells HandleCheckpoint that the checkpoint was written in Tx.
func (c *TxCheckpoint) Written() { c.written = true }

type txCheckpointKey struct{}

// TxCheckpointFrom returns the TxCheckpoint a SetCheckpoint's context
// carries, or nil outside HandleCheckpoint.
func TxCheckpointFrom(ctx context.Context) *TxCheckpoint {
	c, _ := ctx.Value(txCheckpointKey{}).(*TxCheckpoint)
	return c
}

type partitionKey struct{}

// partitionOf returns the partition client of the event a handler runs
// for.
func partitionOf(ctx context.Context) *azeventhubs.ProcessorPartitionClient {
	pc, _ := ctx.Value(partitionKey{}).(*azeventhubs.ProcessorPartitionClient)
	return pc
}

// HandleCheckpoint runs fn inside a transaction of the guard's store
// together with the event's key (idem.DoTx, as HandleTx) and the
// partition's checkpoint, which the Processor's CheckpointStore writes in
// the same transaction: the effects, the key and the checkpoint commit
// together, or none does. The checkpoint's statement comes first and
// takes the partition's row, so fn never runs for an event the checkpoint
// is already past: a crash before the batch's checkpoint, an ownership
// that moved mid-batch (the former owner's transaction waits for the new
// owner's, then finds the checkpoint moved and rolls back) and a lost
// checkpoint (the key's marker, within the guard's Retention) apply
// nothing twice; such an event settles as a duplicate.
//
// The Processor must run on a CheckpointStore that writes in the
// transaction (broker/eventhubs/checkpointstore, on the guard's own
// database); with any other, each event fails with an error wrapping
// ErrNoTxCheckpoints and nothing is written. fn's errors are as for
// HandleTx: an error rolls everything back and the event is tried again,
// idem.Permanent dead-letters it (the checkpoint moves past it with the
// batch's), idem.ErrDuplicate and idem.ErrSuperseded roll back and
// acknowledge it. The guard's store must implement idem.TxStore[Tx].
func HandleCheckpoint[Tx any](fn func(ctx context.Context, tx Tx, ev *azeventhubs.ReceivedEventData) error) Handler {
	if fn == nil {
		return Handler{}
	}
	return broker.HandleRun(func(ctx context.Context, g *idem.Guard, im idem.Message, ev *azeventhubs.ReceivedEventData) (idem.Result, error) {
		pc := partitionOf(ctx)
		if pc == nil {
			return idem.Result{Outcome: idem.OutcomeFailed}, errors.New("eventhubs: HandleCheckpoint outside a Consumer")
		}
		var fnErr error
		res, err := idem.DoTx(ctx, g, im, func(ctx context.Context, tx Tx) ([]byte, error) {
			fnErr = nil
			done, cancel := context.WithCancel(ctx)
			cancel() // a store that does not take the transaction writes nothing
			c := &TxCheckpoint{Tx: tx, Ctx: ctx}
			err := pc.UpdateCheckpoint(context.WithValue(done, txCheckpointKey{}, c), ev, nil)
			switch {
			case errors.Is(err, ErrCheckpointBehind):
				return nil, idem.ErrDuplicate // applied before: roll back and ack
			case !c.written && (err == nil || errors.Is(err, context.Canceled) && ctx.Err() == nil):
				err = ErrNoTxCheckpoints
			}
			if err != nil {
				return nil, &idem.StoreError{Op: "checkpoint", Err: fmt.Errorf("eventhubs: partition %s: %w", pc.PartitionID(), err)}
			}
			fnErr = fn(ctx, tx, ev)
			return nil, fnErr
		})
		if res.Outcome == idem.OutcomeFailed && fnErr == nil && err != nil {
			res.Outcome = idem.OutcomeStoreError // the checkpoint's statement failed, not fn
		}
		return res, err
	}, idem.CheckTx[Tx])
}
