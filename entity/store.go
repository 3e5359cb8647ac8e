package entity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Store is an idem.TxStore[*sql.Tx] with no bookkeeping, for entity mode
// and version guards: the business rows are the only record. Mark always
// acquires (the handler's unique insert or version check decides),
// SaveResult writes nothing, and InTx runs a plain transaction on the
// database, so idem.DoTx and the broker integrations' transactional
// handlers work unchanged on a guard from idem.NewInbox:
//
//	g, err := idem.NewInbox(entity.NewStore(db, nil), idem.Options{Scope: "orders"})
//
// Store is not an idem.Store: without a record there is no claim, lease or
// fencing, so a two-phase guard over it would run every delivery's side
// effect. idem.New does not compile with it, and the two-phase methods of a
// NewInbox guard (Do, DoKey, ClaimBatch) return an error wrapping
// idem.ErrNoRecords without running the handler.
//
// Without a record there is no lease either: concurrent deliveries of one
// message both run the handler, and the unique constraint (or the version
// condition) lets exactly one transaction apply it.
type Store struct {
	NoRecords[*sql.Tx]
	db   *sql.DB
	opts *sql.TxOptions
}

var _ idem.TxStore[*sql.Tx] = (*Store)(nil)

// NewStore returns a bookkeeping-free store whose transactions run on db.
// txOpts may be nil (the driver's default isolation). Give it to
// idem.NewInbox, not idem.New.
func NewStore(db *sql.DB, txOpts *sql.TxOptions) *Store { return &Store{db: db, opts: txOpts} }

// NoRecords is the bookkeeping-free part of an idem.TxStore[Tx]: Mark
// acquires and writes nothing, SaveResult records nothing. Store and
// entitypgx.Store embed it and add InTx. It has no Claim, Complete,
// Release, Renew, Get or Sweep, so nothing built on it is an idem.Store.
type NoRecords[Tx any] struct{}

// Mark writes nothing and acquires: the handler's business insert, in the
// same transaction, is the record and decides. The request is checked and
// completed with storekit.PrepareClaim first, and its error (an
// *idem.InvalidDataError for a request without its times) is returned as
// it is. The reported record is the marker a record-keeping store would
// write for an absent key (storekit.ApplyMark): completed, with the prepared
// request's NewToken, a fresh random token, never a fixed one.
func (NoRecords[Tx]) Mark(ctx context.Context, _ Tx, req idem.ClaimRequest) (idem.Claim, error) {
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	c, _ := storekit.ApplyMark(nil, req) // no stored record: a new marker
	return c, nil
}

// SaveResult records nothing: read a result from the business row.
func (NoRecords[Tx]) SaveResult(context.Context, Tx, idem.Key, []byte) error { return nil }

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
