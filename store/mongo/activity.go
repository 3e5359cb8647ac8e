package mongoidem

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

var _ idem.ActivityCounter = (*Store)(nil)

// Activity implements idem.ActivityCounter with one find of the records
// created or updated in the window (the fields the tally needs only),
// counted as they stream: $dateTrunc and friends are not on every server
// (FerretDB), and a find is.
func (s *Store) Activity(ctx context.Context, q idem.ActivityQuery) ([]idem.ScopeActivity, error) {
	q, err := storekit.PrepareActivity(q)
	if err != nil {
		return nil, err
	}
	window := bson.D{{Key: "$gte", Value: q.From}, {Key: "$lt", Value: q.To()}}
	filter := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fCreatedAt, Value: window}},
		bson.D{{Key: fUpdatedAt, Value: window}},
	}}}
	if q.Scope != "" {
		filter = append(filter, bson.E{Key: fScope, Value: q.Scope})
	}
	cur, err := s.coll.Find(ctx, filter, options.Find().SetProjection(bson.D{
		{Key: fScope, Value: 1}, {Key: fState, Value: 1}, {Key: "attempts", Value: 1},
		{Key: fCreatedAt, Value: 1}, {Key: fUpdatedAt, Value: 1},
	}))
	if err != nil {
		return nil, wrap("activity", err)
	}
	defer cur.Close(ctx)
	t := storekit.NewActivityTally(q)
	for cur.Next(ctx) {
		var d recordDoc
		if err := cur.Decode(&d); err != nil {
			return nil, wrap("activity", err)
		}
		t.Record(idem.Record{Scope: d.Scope, State: idem.State(d.State), Attempts: int(d.Attempts),
			CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt})
	}
	if err := cur.Err(); err != nil {
		return nil, wrap("activity", err)
	}
	return t.Result(), nil
}
