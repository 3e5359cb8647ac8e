package mysql

import (
	"context"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// supersedeSQL releases a settled record under its token with the content
// an operator accepted, while it has not expired (a NULL expiry is
// "never"); token, attempts, created_at and expires_at stay. A repeat of
// the very same supersede changes no row, which without clientFoundRows
// counts as none matched: storekit.SupersedeByUpdate reads the record to
// tell. Parameters: fingerprint, now, now, scope, id, token, now.
func (s *Store) supersedeSQL() string {
	return "UPDATE " + s.table + " SET state = 'released', fingerprint = ?, result = NULL, lease_until = ?, updated_at = ?" +
		" WHERE scope = ? AND id = ? AND token = ? AND state IN ('completed', 'released') AND (expires_at IS NULL OR expires_at > ?)"
}

// Supersede implements idem.Superseder with one conditional UPDATE; when it
// changes no row, the record read after it says why
// (storekit.SupersedeByUpdate).
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	req.Now = req.Now.Truncate(time.Millisecond)
	query, now := s.supersedeSQL(), sqlrecord.MS(req.Now)
	return storekit.SupersedeByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		res, err := s.db.ExecContext(ctx, query, req.Fingerprint, now, now, req.Key.Scope, req.Key.StoredID(), req.Token, now)
		if err != nil {
			return false, dataErr("supersede", err)
		}
		n, err := res.RowsAffected()
		return n > 0, err
	}, s.Get)
}
