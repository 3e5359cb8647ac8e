package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/sqlrecord"
)

var _ idem.ActivityCounter = (*Store)(nil)

// Activity implements idem.ActivityCounter with one grouped scan of the
// table (created_at and updated_at are not indexed: the console counts now
// and then, in the background).
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	out, err := sqlrecord.Activity(ctx, s.db, quoteIdent(s.opts.Table), "/", q)
	if err != nil && !errors.Is(err, idem.ErrInvalidOptions) {
		return nil, fmt.Errorf("sqlite: activity: %w", dataErr("activity", err))
	}
	return out, err
}
