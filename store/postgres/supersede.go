package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// supersedeSQL releases a settled record under its token ($3) with the
// content an operator accepted ($4) while it has not expired at now ($5);
// token, attempts, created_at, expires_at and sweep_at stay, so the sweep
// finds the row when it always would.
func (s *Store) supersedeSQL() string {
	return `UPDATE ` + s.names.table + ` SET state = ` + fmt.Sprint(stReleased) + `, fingerprint = $4, result = NULL,
	lease_until = $5, updated_at = $5
	WHERE scope = $1 AND id = $2 AND token = $3 AND state IN (` + fmt.Sprint(stCompleted, ", ", stReleased) + `) AND expires_at > $5`
}

// Supersede implements idem.Superseder with one conditional UPDATE; when it
// changes no row, the record read after it says why
// (storekit.SupersedeByUpdate).
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	req.Now = micro(req.Now)
	query := s.supersedeSQL()
	return storekit.SupersedeByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		err := s.fenced(ctx, "supersede", query, req.Key.Scope, req.Key.StoredID(), req.Token, req.Fingerprint, req.Now)
		if errors.Is(err, idem.ErrLeaseLost) { // no row changed
			return false, nil
		}
		return err == nil, err
	}, s.Get)
}
