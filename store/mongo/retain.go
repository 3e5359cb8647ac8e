package mongoidem

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Retainer = (*Store)(nil)

// retainable holds while the record is completed under token, has not
// expired at now and is kept less long than until: what Retain raises.
func retainable(token int64, now, until time.Time) cond {
	return cond{
		filter: bson.D{
			{Key: fToken, Value: token},
			{Key: fState, Value: string(idem.StateCompleted)},
			{Key: fExpiresAt, Value: bson.D{{Key: "$gt", Value: now}, {Key: "$lt", Value: until}}},
		},
		match: func(d recordDoc) bool {
			return d.Token == token && d.State == string(idem.StateCompleted) &&
				d.ExpiresAt.After(now) && d.ExpiresAt.Before(until)
		},
	}
}

// Retain implements idem.Retainer: one conditional update of expires_at,
// and of ttl_at (the TTL index's deletion time, on the server's clock) to
// at least the new retention end; when it matches nothing, the record read
// after it says why (storekit.RetainByUpdate).
func (s *Store) Retain(ctx context.Context, req idem.RetainRequest) error {
	req, err := storekit.PrepareRetain(req)
	if err != nil {
		return err
	}
	if err := checkTimes("retain", req.Now, req.ExpiresAt); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req.Now, req.ExpiresAt = ms(req.Now), ms(req.ExpiresAt)
	update := bson.D{{Key: "$set", Value: bson.D{{Key: fExpiresAt, Value: req.ExpiresAt}}}}
	ttl, err := s.ttl(ctx, req.Now, req.ExpiresAt)
	if err != nil {
		return wrap("retain", err)
	}
	if ttl != nil {
		update = append(update, bson.E{Key: "$max", Value: bson.D{{Key: fTTLAt, Value: *ttl}}})
	}
	c := retainable(req.Token, req.Now, req.ExpiresAt)
	return storekit.RetainByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		ok, err := s.writeIf(ctx, idOf(req.Key), c, nil, time.Time{}, func(ctx context.Context, filter bson.D, rev string) (int64, error) {
			res, err := s.coll.UpdateOne(ctx, filter, setRev(update, rev))
			if err != nil {
				return 0, err
			}
			return res.MatchedCount, nil
		})
		return ok, wrap("retain", err)
	}, s.Get)
}
