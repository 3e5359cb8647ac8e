package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// retainSQL raises a completed record's expiry ($4) under its token while
// it has not expired at now ($6); a row kept that long already is left
// alone. sweep_at follows as Renew moves it ($5, the new expiry's
// sweepAt): only when the expiry moved more than sweepSlack past it, so
// the sweep stops finding the row at its old expiry.
func (s *Store) retainSQL() string {
	return `UPDATE ` + s.names.table + ` SET expires_at = $4,
	sweep_at = CASE WHEN $5::timestamptz > sweep_at + ` + sweepSlackSQL + ` THEN $5::timestamptz ELSE sweep_at END
	WHERE scope = $1 AND id = $2 AND token = $3 AND state = ` + fmt.Sprint(stCompleted) + ` AND expires_at > $6 AND expires_at < $4`
}

// Retain implements idem.Retainer with one conditional UPDATE; when it
// changes no row, the record read after it says why (storekit.RetainByUpdate).
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	req.Now, req.ExpiresAt = micro(req.Now), micro(req.ExpiresAt)
	query := s.retainSQL()
	return storekit.RetainByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		err := s.fenced(ctx, "retain", query, req.Key.Scope, req.Key.StoredID(), req.Token,
			req.ExpiresAt, sweepAt(req.ExpiresAt), req.Now)
		if errors.Is(err, idem.ErrLeaseLost) { // no row changed
			return false, nil
		}
		return err == nil, err
	}, s.Get)
}
