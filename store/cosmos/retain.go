package cosmos

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Retain implements idem.Retainer: one patch, conditional on the record
// being completed under req.Token, unexpired at req.Now and kept for less
// long, that moves its retention to req.ExpiresAt and its time to live to
// what that leaves from req.Now (storekit.RetainByUpdate reads the record
// when the patch changed nothing, to say why).
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The record read back keeps milliseconds; RetainByUpdate compares it
	// with the request. (Now needs no rounding: a time of whole
	// milliseconds is after Now exactly when it is after Now's.)
	req.ExpiresAt = atMS(req.ExpiresAt)
	update := func(ctx context.Context) (bool, error) {
		var ops azcosmos.PatchOperations
		ops.AppendSet("/exp", ms(req.ExpiresAt))
		ops.AppendSet("/ttl", ttlFor(req.Now, req.ExpiresAt))
		cond := fmt.Sprintf("from c where c.token = %d and c.state = '%s' and c.exp > %d and c.exp < %d",
			req.Token, idem.StateCompleted, ms(req.Now), ms(req.ExpiresAt))
		ok, err := s.fenced(ctx, req.Key, cond, ops)
		return ok, wrap("retain", err)
	}
	return storekit.RetainByUpdate(ctx, req, update, s.Get)
}
