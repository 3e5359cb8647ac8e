package storekit

import (
	"context"
	"fmt"

	"github.com/idemgo/idem"
)

// BatchStore is implemented by stores that claim many keys in one round trip
// (one statement, one pipeline); idem.ClaimBatch and the guard's batch claims
// use it when the store has it. Results are in request order. Keys in one
// batch must be distinct: a batch that repeats one is refused whole, nothing
// written, with CheckBatchKeys's *idem.InvalidDataError
// (idem.ErrDuplicateKeyInBatch). Wrappers around a store forward it.
//
// ClaimBatch must not keep reqs, or write to them, once it returns (as
// io.Writer must not keep p): the guard uses their room again for its next
// batch.
type BatchStore interface {
	ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error)
}

// CheckBatchKeys returns an *idem.InvalidDataError for op wrapping
// idem.ErrDuplicateKeyInBatch, naming the key, when two of reqs have the same
// key; nil otherwise. Stores call it first in their batch operations so
// that every store classifies a repeat the same way.
//
// The keys of a batch a guard made and found distinct (Guard.ClaimBatch)
// are not checked again.
func CheckBatchKeys(op string, reqs []idem.ClaimRequest) error {
	if len(reqs) < 2 || guardCheckedBatch(reqs) {
		return nil
	}
	seen := make(map[idem.Key]int, len(reqs))
	for i, r := range reqs {
		if j, dup := seen[r.Key]; dup {
			return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("%w: %s at positions %d and %d", idem.ErrDuplicateKeyInBatch, r.Key, j, i)}
		}
		seen[r.Key] = i
	}
	return nil
}

// MarkDeferrer is implemented by idem.TxStores that can send the marker
// together with the handler's first statement instead of ahead of it, saving
// idem.DoTx a round trip (store/postgres with Options.MarkWithFirstStatement).
// DoTx then starts the handler before it knows whether the key is new.
type MarkDeferrer[Tx any] interface {
	// DeferMark queues the marker for req on tx, a transaction of InTx that
	// has run no statement, and returns the claim Mark returns for a new
	// key; deferred is false when it queued nothing (the store is not set
	// to, or tx has begun), and then DoTx calls Mark.
	//
	// When the queued marker does not go in (the key is recorded, or the
	// marker fails), tx's statement that carried it and every later one
	// fail, nothing commits, and InTx runs its function again in a new
	// transaction, where DeferMark reports false and Mark decides. When
	// the function fails before any statement, InTx sends the marker anyway
	// to learn which of the two it is: a recorded key is reported as such
	// rather than as the function's failure.
	DeferMark(ctx context.Context, tx Tx, req idem.ClaimRequest) (c idem.Claim, deferred bool, err error)
}

// Pinger is implemented by idem.TxStores that can say whether their server
// answers. When a transactional handler fails, idem.DoTx pings the store:
// a store that does not answer means the handler's statements failed with
// it (a server restarted mid-transaction), so DoTx reports a retryable
// *idem.StoreError (a consumer holds the message through the outage,
// spending no delivery) rather than the handler's failure (counted toward
// a delivery limit). store/postgres and store/mysql implement it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PrepareClaimBatch is the start of every store's ClaimBatch: CheckBatchKeys,
// then PrepareClaim of each request, in order, so that a repeated key or a
// request a store cannot take rejects the whole batch before anything is
// written. It returns the prepared requests (a new slice).
func PrepareClaimBatch(reqs []idem.ClaimRequest) ([]idem.ClaimRequest, error) {
	if err := CheckBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	prepared := make([]idem.ClaimRequest, len(reqs))
	for i, r := range reqs {
		p, err := PrepareClaim(r)
		if err != nil {
			return nil, err
		}
		prepared[i] = p
	}
	return prepared, nil
}
