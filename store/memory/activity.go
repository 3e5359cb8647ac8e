package memory

import (
	"context"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.ActivityCounter = (*Store)(nil)

// Activity implements idem.ActivityCounter by reading every record.
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := storekit.NewActivityTally(q)
	s.mu.Lock()
	for _, r := range s.recs {
		t.Record(*r)
	}
	s.mu.Unlock()
	return t.Result(), nil
}
