package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

// Complete implements idem.Store with one fenced UPDATE: the row changes only
// if req.Token is current and the record in progress. The state always
// changes, so zero affected rows means the fence failed whatever the
// connection's clientFoundRows setting.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	return s.fenced(ctx, s.q.complete, req.Key, req.Token, false, resultArg(req.Result), sqlrecord.MS(req.ExpiresAt), sqlrecord.MS(req.Now))
}

// Release implements idem.Store with one fenced UPDATE (state released, the
// lease ended at req.Now).
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	return s.fenced(ctx, s.q.release, req.Key, req.Token, false, sqlrecord.MS(req.Now), sqlrecord.MS(req.Now))
}

// Renew implements idem.Store with one fenced UPDATE of the lease.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	return s.fenced(ctx, s.q.renew, req.Key, req.Token, true, sqlrecord.MS(req.LeaseUntil), sqlrecord.MS(req.Now))
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
