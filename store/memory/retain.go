package memory

import (
	"context"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// Retain implements idem.Retainer: it keeps a completed record until at
// least req.ExpiresAt.
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apply(req.Key, func(r *idem.Record) (bool, error) {
		return storekit.ApplyRetain(r, req)
	})
}
