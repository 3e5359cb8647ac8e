package memory

import (
	"context"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// Supersede implements idem.Superseder: it releases a settled record with
// the content an operator accepted.
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apply(req.Key, func(r *idem.Record) (bool, error) {
		return true, storekit.ApplySupersede(r, req)
	})
}
