package entity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
)

// Store is an idem.Store with no bookkeeping, for entity mode and version
// guards: the business rows are the only record. Claims always succeed (the
// handler's unique insert or version check decides), complete and release
// write nothing, and InTx runs a plain transaction on the database, so
// idem.DoTx and the broker integrations' transactional handlers work
// unchanged.
//
// Without a record there is no lease: concurrent deliveries of one message
// both run the handler, and the unique constraint (or the version
// condition) lets exactly one transaction apply it.
type Store struct {
	NoRecords
	db   *sql.DB
	opts *sql.TxOptions
}

var (
	_ idem.Store            = (*Store)(nil)
	_ idem.TxStore[*sql.Tx] = (*Store)(nil)
)

// NewStore returns a bookkeeping-free store whose transactions run on db.
// txOpts may be nil (the driver's default isolation).
func NewStore(db *sql.DB, txOpts *sql.TxOptions) *Store { return &Store{db: db, opts: txOpts} }

// NoRecords is the bookkeeping-free part of an idem.Store: claims always
// acquire, nothing is written, read or swept. Store and entitypgx.Store embed
// it and add transactions.
type NoRecords struct{}

// Claim always acquires.
func (NoRecords) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	return idem.Claim{Outcome: idem.ClaimAcquired, Record: idem.Record{
		Scope: req.Key.Scope, ID: req.Key.StoredID(), DisplayID: req.Key.DisplayID(), State: idem.StateInProgress,
		Fingerprint: req.Fingerprint, Token: 1, Attempts: 1, LeaseUntil: req.LeaseUntil, ExpiresAt: req.ExpiresAt,
		CreatedAt: req.Now, UpdatedAt: req.Now,
	}}, nil
}

// Complete records nothing.
func (NoRecords) Complete(context.Context, idem.CompleteRequest) error { return nil }

// Release records nothing.
func (NoRecords) Release(context.Context, idem.ReleaseRequest) error { return nil }

// Renew records nothing.
func (NoRecords) Renew(context.Context, idem.RenewRequest) error { return nil }

// Get finds nothing: the business tables are the record.
func (NoRecords) Get(context.Context, idem.Key) (idem.Record, error) {
	return idem.Record{}, idem.ErrNotFound
}

// Sweep deletes nothing: business rows are not swept.
func (NoRecords) Sweep(context.Context, idem.SweepRequest) (int, error) { return 0, nil }

// InTx runs fn in a transaction on the database.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	tx, err := s.db.BeginTx(ctx, s.opts)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return fmt.Errorf("%w (rollback: %v)", err, rerr)
		}
		return err
	}
	return tx.Commit()
}

// Mark writes nothing and acquires.
func (s *Store) Mark(ctx context.Context, _ *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	return s.NoRecords.Claim(ctx, req)
}

// SaveResult records nothing.
func (s *Store) SaveResult(context.Context, *sql.Tx, idem.Key, []byte) error { return nil }
