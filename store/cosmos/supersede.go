package cosmos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// Supersede implements idem.Superseder: it reads the record, decides with
// storekit.ApplySupersede, and replaces it only if its ETag is still the
// one read (If-Match), as a claim of an existing key does; a record
// changed (412) or gone (404) in between is read again. The retention
// stays, and the item's time to live is what it leaves from req.Now: a
// replace restarts Cosmos DB's countdown, so the record still goes when it
// would have.
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return wrap("supersede", s.supersede(ctx, req))
}

func (s *Store) supersede(ctx context.Context, req idem.SupersedeRequest) error {
	a := addressOf(req.Key)
	for range maxClaimRounds {
		cur, etag, err := s.read(ctx, a)
		if statusOf(err) == http.StatusNotFound {
			return idem.ErrNotFound
		}
		if err != nil {
			return err
		}
		rec := cur.record()
		if err := storekit.ApplySupersede(&rec, req); err != nil {
			return err
		}
		body, err := json.Marshal(docOf(withMS(rec), req.Now))
		if err != nil {
			return err
		}
		_, err = s.coll.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(a.pk), a.id, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		switch statusOf(err) {
		case 0:
			return err
		case http.StatusPreconditionFailed, http.StatusNotFound:
			continue // changed or gone since the read: decide again
		}
		return err
	}
	return fmt.Errorf("the record of %s changed %d times during one supersede; retry", req.Key, maxClaimRounds)
}
