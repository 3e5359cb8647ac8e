package mysql

import (
	"context"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// retainSQL raises a completed record's expiry under its token while it has
// not expired; a row kept that long already, or NULL ("never"), is left
// alone, so a matched row always changes and the affected-rows count means
// the same whatever clientFoundRows says. Parameters: expires_at, scope,
// id, token, now, expires_at.
func (s *Store) retainSQL() string {
	return "UPDATE " + s.table + " SET expires_at = ?" +
		" WHERE scope = ? AND id = ? AND token = ? AND state = 'completed' AND expires_at > ? AND expires_at < ?"
}

// Retain implements idem.Retainer with one conditional UPDATE; when it
// changes no row, the record read after it says why (storekit.RetainByUpdate).
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	req.Now, req.ExpiresAt = req.Now.Truncate(time.Millisecond), req.ExpiresAt.Truncate(time.Millisecond)
	query, exp := s.retainSQL(), sqlrecord.MS(req.ExpiresAt)
	return storekit.RetainByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		res, err := s.db.ExecContext(ctx, query, exp, req.Key.Scope, req.Key.StoredID(), req.Token, sqlrecord.MS(req.Now), exp)
		if err != nil {
			return false, dataErr("retain", err)
		}
		n, err := res.RowsAffected()
		return n > 0, err
	}, s.Get)
}
