package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// supersedeSQL releases a settled record under its token with the content
// an operator accepted, while it has not expired (a NULL expiry is
// "never"); token, attempts, created_at and expires_at stay. Parameters:
// fingerprint, now, scope, id, token.
const supersedeSQL = `UPDATE {t} SET state = 'released', fingerprint = ?1, result = NULL, lease_until = ?2, updated_at = ?2
	WHERE scope = ?3 AND id = ?4 AND token = ?5 AND state IN ('completed', 'released') AND (expires_at IS NULL OR expires_at > ?2)`

// Supersede implements idem.Superseder with one conditional UPDATE; when it
// changes no row, the record read after it says why
// (storekit.SupersedeByUpdate).
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	req.Now = req.Now.Truncate(time.Millisecond)
	query := replaceTable(supersedeSQL, s.opts.Table)
	return storekit.SupersedeByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		n, err := s.exec(ctx, query, req.Fingerprint, sqlrecord.MS(req.Now), req.Key.Scope, req.Key.StoredID(), req.Token)
		if err != nil {
			return false, dataErr("supersede", fmt.Errorf("sqlite: supersede %s: %w", req.Key, err))
		}
		return n > 0, nil
	}, s.Get)
}
