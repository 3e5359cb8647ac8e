package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// retainSQL raises a completed record's expiry, under its token, while it
// has not expired; a row whose expiry is that late already, or NULL
// ("never"), is left as it is. Parameters: expires_at, scope, id, token,
// now.
const retainSQL = `UPDATE {t} SET expires_at = ?1
	WHERE scope = ?2 AND id = ?3 AND token = ?4 AND state = 'completed' AND expires_at > ?5 AND expires_at < ?1`

// Retain implements idem.Retainer with one conditional UPDATE; when it
// changes no row, the record read after it says why (storekit.RetainByUpdate).
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	req.Now, req.ExpiresAt = req.Now.Truncate(time.Millisecond), req.ExpiresAt.Truncate(time.Millisecond)
	query := replaceTable(retainSQL, s.opts.Table)
	return storekit.RetainByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		n, err := s.exec(ctx, query, sqlrecord.MS(req.ExpiresAt), req.Key.Scope, req.Key.StoredID(), req.Token, sqlrecord.MS(req.Now))
		if err != nil {
			return false, dataErr("retain", fmt.Errorf("sqlite: retain %s: %w", req.Key, err))
		}
		return n > 0, nil
	}, s.Get)
}

// replaceTable puts the quoted table name in query's {t}.
func replaceTable(query, table string) string {
	return strings.ReplaceAll(query, "{t}", quoteIdent(table))
}
