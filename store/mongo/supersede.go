package mongoidem

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.Superseder = (*Store)(nil)

// supersedable holds while the record is settled (completed or released)
// under token and has not expired at now: what Supersede changes.
func supersedable(token int64, now time.Time) cond {
	settled := bson.A{string(idem.StateCompleted), string(idem.StateReleased)}
	return cond{
		filter: bson.D{
			{Key: fToken, Value: token},
			{Key: fState, Value: bson.D{{Key: "$in", Value: settled}}},
			{Key: fExpiresAt, Value: bson.D{{Key: "$gt", Value: now}}},
		},
		match: func(d recordDoc) bool {
			return d.Token == token && (d.State == string(idem.StateCompleted) || d.State == string(idem.StateReleased)) &&
				d.ExpiresAt.After(now)
		},
	}
}

// Supersede implements idem.Superseder: one conditional update of the
// state, fingerprint, lease and result; when it matches nothing, the record
// read after it says why (storekit.SupersedeByUpdate). expires_at and
// ttl_at (the TTL index's deletion time) stay: the record expires when it
// would have.
func (s *Store) Supersede(ctx context.Context, req idem.SupersedeRequest) error {
	req, err := storekit.PrepareSupersede(req)
	if err != nil {
		return err
	}
	if err := checkTimes("supersede", req.Now); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req.Now = ms(req.Now)
	update := bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fState, Value: string(idem.StateReleased)},
			{Key: fFingerprint, Value: req.Fingerprint},
			{Key: fLeaseUntil, Value: req.Now},
			{Key: fUpdatedAt, Value: req.Now},
		}},
		{Key: "$unset", Value: bson.D{{Key: fResult, Value: ""}}},
	}
	c := supersedable(req.Token, req.Now)
	return storekit.SupersedeByUpdate(ctx, req, func(ctx context.Context) (bool, error) {
		ok, err := s.writeIf(ctx, idOf(req.Key), c, nil, time.Time{}, func(ctx context.Context, filter bson.D, rev string) (int64, error) {
			res, err := s.coll.UpdateOne(ctx, filter, setRev(update, rev))
			if err != nil {
				return 0, err
			}
			return res.MatchedCount, nil
		})
		return ok, wrap("supersede", err)
	}, s.Get)
}
