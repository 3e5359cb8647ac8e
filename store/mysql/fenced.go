package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

// Complete implements idem.Store with one fenced UPDATE: the row changes only
// if req.Token is current and the record in progress. The state always
// changes, so zero affected rows means the fence failed whatever the
// connection's clientFoundRows setting. A result the server cannot take is an
// *idem.InvalidDataError.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	if err := checkResult(ctx, s.db, "complete", req.Result); err != nil {
		return err
	}
	err = s.fenced(ctx, s.q.complete, req.Key, req.Token, false, resultArg(req.Result), sqlrecord.MS(req.ExpiresAt), sqlrecord.MS(req.Now))
	return resultErr("complete", err)
}

// Release implements idem.Store with one fenced UPDATE (state released, the
// lease ended at req.Now). The fingerprint stays: released means "may be
// retried", and the next claim keeps the content the key was claimed with.
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if _, err := storekit.PrepareRelease(req); err != nil {
		return err
	}
	err := s.fenced(ctx, s.q.release, req.Key, req.Token, false, sqlrecord.MS(req.Now), sqlrecord.MS(req.Now))
	return dataErr("release", err)
}

// Renew implements idem.Store with one fenced UPDATE of the lease, which
// carries the expiry with it: expires_at = GREATEST(expires_at, lease end), so
// a record whose handler outlives its retention never expires while its lease
// is live.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	lease := sqlrecord.MS(req.LeaseUntil)
	err = s.fenced(ctx, s.q.renew, req.Key, req.Token, true, lease, lease, sqlrecord.MS(req.Now))
	return dataErr("renew", err)
}

// fenced runs an UPDATE whose WHERE clause is the fence (key, token,
// in_progress) after the SET arguments set, and maps zero affected rows to
// idem.ErrLeaseLost. MySQL counts changed rows, not matched ones, unless the
// DSN sets clientFoundRows; a renewal to the very same lease and time changes
// nothing, so for updates that may be no-ops (mayBeNoop) a zero count is
// confirmed by reading the fence.
func (s *Store) fenced(ctx context.Context, query string, key idem.Key, token int64, mayBeNoop bool, set ...any) error {
	res, err := s.db.ExecContext(ctx, query, append(set, key.Scope, key.StoredID(), token)...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	if mayBeNoop {
		var one int
		err := s.db.QueryRowContext(ctx, s.q.owns, key.Scope, key.StoredID(), token).Scan(&one)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return idem.ErrLeaseLost
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	r, err := sqlrecord.Scan(s.db.QueryRowContext(ctx, s.q.get, key.Scope, key.StoredID()))
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Record{}, idem.ErrNotFound
	}
	return r, err
}
