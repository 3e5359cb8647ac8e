package load

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// Batch is one batch of a load as its Writer gets it.
type Batch struct {
	// Rows have distinct keys and come in key order (byte order of
	// Row.Key): writers that lock keys lock them in one order, so two loads
	// of overlapping files cannot deadlock. The input's repeats of a key
	// are settled by the loader, not written.
	Rows []Row
	// Scope is the load's scope (Options.Scope).
	Scope string
	// Now is the batch's instant (Options.Clock), and ExpiresAt the
	// retention end of markers written for it.
	Now, ExpiresAt time.Time
}

// Key returns the key of row i in the load's scope.
func (b *Batch) Key(i int) idem.Key { return idem.Key{Scope: b.Scope, ID: b.Rows[i].Key} }

// Requests returns the claim requests of the rows, in order: the markers a
// transactional inbox writes for them (completed at once, kept until
// ExpiresAt).
func (b *Batch) Requests() []idem.ClaimRequest {
	reqs := make([]idem.ClaimRequest, len(b.Rows))
	for i, r := range b.Rows {
		reqs[i] = idem.ClaimRequest{
			Key: b.Key(i), Fingerprint: r.Fingerprint,
			Now: b.Now, LeaseUntil: b.Now, ExpiresAt: b.ExpiresAt,
		}
	}
	return reqs
}

// Writer claims the keys of a batch and writes its new rows, inside the
// load's transaction tx: the claims and the rows commit together or not at
// all, so a load that is cut off and run again finds every committed row
// claimed and writes it nowhere twice.
//
// It returns one claim per row of b, in order, carrying the fingerprint
// stored under the key (Record.Fingerprint): idem.ClaimAcquired for a row it
// wrote, idem.ClaimDuplicate for a key stored before (the row not written).
// Other outcomes fail the batch.
//
// Marked is the Writer of the transactional inbox (any TxStore); package
// load/loadpgx has one that keeps key and fingerprint in the business table
// itself (entity mode).
type Writer[Tx any] interface {
	WriteBatch(ctx context.Context, tx Tx, b *Batch) ([]idem.Claim, error)
}

// WriterFunc adapts a function to Writer.
type WriterFunc[Tx any] func(ctx context.Context, tx Tx, b *Batch) ([]idem.Claim, error)

// WriteBatch calls f.
func (f WriterFunc[Tx]) WriteBatch(ctx context.Context, tx Tx, b *Batch) ([]idem.Claim, error) {
	return f(ctx, tx, b)
}

// BatchMarker is implemented by transactional inboxes that mark many keys
// in one statement (store/postgres's MarkBatch).
type BatchMarker[Tx any] interface {
	MarkBatch(ctx context.Context, tx Tx, reqs []idem.ClaimRequest) ([]idem.Claim, error)
}

// Marked returns the Writer of the transactional inbox: each batch's keys
// are marked in store's records (completed markers in the load's scope,
// kept for Options.Retention) inside the load's transaction, with one
// statement per batch when store is a BatchMarker (store/postgres) and one
// per row otherwise; then write gets the rows whose keys were new, to write
// with tx (in key order). Use it when the target table has no room for a key and a
// fingerprint, or the rows go to several tables.
//
// The markers are the only record of what was loaded: a row loaded again
// after its marker expired (and was swept) is new again.
func Marked[Tx any](store idem.TxStore[Tx], write func(ctx context.Context, tx Tx, rows []Row) error) Writer[Tx] {
	return marked[Tx]{store: store, write: write}
}

type marked[Tx any] struct {
	store idem.TxStore[Tx]
	write func(ctx context.Context, tx Tx, rows []Row) error
}

func (m marked[Tx]) WriteBatch(ctx context.Context, tx Tx, b *Batch) ([]idem.Claim, error) {
	rows, reqs := b.Rows, b.Requests()
	var (
		claims []idem.Claim
		err    error
	)
	if bm, ok := m.store.(BatchMarker[Tx]); ok {
		claims, err = bm.MarkBatch(ctx, tx, reqs)
	} else {
		claims = make([]idem.Claim, len(reqs))
		for i, r := range reqs {
			if claims[i], err = m.store.Mark(ctx, tx, r); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if len(claims) != len(reqs) {
		return nil, fmt.Errorf("load: %d marks for %d rows", len(claims), len(reqs))
	}
	fresh := make([]Row, 0, len(rows))
	for i, c := range claims {
		if c.Outcome != idem.ClaimAcquired {
			continue
		}
		if conflicting(rows[i].Fingerprint, c.Record.Fingerprint) {
			// A released two-phase record in the load's scope keeps its
			// first content: its marker now stands for that content, which
			// this row does not have. Nothing of the batch may commit.
			return nil, fmt.Errorf("load: row %d: %w", rows[i].N,
				&idem.ConflictError{Key: reqs[i].Key, Fingerprint: rows[i].Fingerprint, Record: c.Record})
		}
		fresh = append(fresh, rows[i])
	}
	if len(fresh) > 0 {
		if err := m.write(ctx, tx, fresh); err != nil {
			return nil, err
		}
	}
	return claims, nil
}

func conflicting(rowFP, storedFP string) bool {
	return rowFP != "" && storedFP != "" && rowFP != storedFP
}
