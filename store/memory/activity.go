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
	s.t.each(func(i int32) bool {
		t.Record(s.t.full(i))
		return true
	})
	s.mu.Unlock()
	return t.Result(), nil
}
