package mysql

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
	out, err := sqlrecord.Activity(ctx, s.db, s.table, "DIV", q)
	if err != nil && !errors.Is(err, idem.ErrInvalidOptions) {
		if se := missingTable(err); se != nil {
			err = se
		}
		return nil, fmt.Errorf("mysql: activity: %w", err)
	}
	return out, err
}
