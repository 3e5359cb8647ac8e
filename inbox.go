package idem

import (
	"context"
	"fmt"
)

// NewInbox returns a guard for the transactional inbox alone, over a TxStore
// that keeps no records of its own: entity mode, where the business row's
// unique insert is the only record (entity.Store, entitypgx.Store). Such a
// store is not an idem.Store, so New does not take it; the guard NewInbox
// returns runs DoTx, DoTxKey and MarkTx (and the broker integrations'
// transactional handlers), and its two-phase methods (Do, DoKey,
// ClaimBatch) return an error wrapping ErrNoRecords without running the
// handler: without a record there is no lease and no fencing, so a side
// effect outside the database would not be deduplicated.
func NewInbox[Tx any](ts TxStore[Tx], opts Options) (*Guard, error) {
	if ts == nil {
		return nil, fmt.Errorf("%w: nil TxStore", ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Guard{store: noRecords{ts}, inbox: ts, opts: opts, hb: newHeartbeat(opts.Lease)}, nil
}

// noRecords is the Store of a NewInbox guard: every two-phase step is
// refused, so nothing runs unguarded.
type noRecords struct{ ts any }

func (n noRecords) err() error {
	return fmt.Errorf("%w: %T keeps no records; use idem.DoTx with an entity insert (or a store with records for two-phase work)", ErrNoRecords, n.ts)
}

func (n noRecords) Claim(context.Context, ClaimRequest) (Claim, error) { return Claim{}, n.err() }
func (n noRecords) Complete(context.Context, CompleteRequest) error    { return n.err() }
func (n noRecords) Release(context.Context, ReleaseRequest) error      { return n.err() }
func (n noRecords) Renew(context.Context, RenewRequest) error          { return n.err() }
func (n noRecords) Get(context.Context, Key) (Record, error)           { return Record{}, n.err() }
func (n noRecords) Sweep(context.Context, SweepRequest) (int, error)   { return 0, n.err() }
