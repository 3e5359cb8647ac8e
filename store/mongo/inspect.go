package mongoidem

import (
	"context"
	"errors"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
)

// List implements idem.Inspector: records in _id order, which is (scope,
// stored id) bytewise, read through the _id index from the page's start
// (after f.After, or the scope's first id) and bounded by the scope's end.
func (s *Store) List(ctx context.Context, f idem.ListFilter) ([]idem.Record, error) {
	var and bson.A
	lower := bson.E{}
	if !f.After.IsZero() {
		lower = bson.E{Key: "$gt", Value: recordID(f.After.Scope(), f.After.StoredID())}
	}
	if f.Scope != "" {
		// The scope's _ids are scope+"\x00"+id; ids hold no NUL, so they
		// all sort below scope+"\x01", and every later scope's above.
		first := recordID(f.Scope, "")
		if lower.Key == "" || lower.Value.(string) < first {
			lower = bson.E{Key: "$gte", Value: first}
		}
		and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: f.Scope + "\x01"}}}})
	}
	if lower.Key != "" {
		and = append(and, bson.D{{Key: "_id", Value: bson.D{lower}}})
	}
	if f.State != "" {
		and = append(and, bson.D{{Key: fState, Value: string(f.State)}})
	}
	if !f.StaleAt.IsZero() {
		and = append(and, bson.D{
			{Key: fState, Value: string(idem.StateInProgress)},
			{Key: fLeaseUntil, Value: bson.D{{Key: "$lte", Value: ms(f.StaleAt)}}},
		})
	}
	if !f.CreatedBefore.IsZero() {
		and = append(and, bson.D{{Key: fCreatedAt, Value: bson.D{{Key: "$lt", Value: ms(f.CreatedBefore)}}}})
	}
	filter := bson.D{}
	if len(and) > 0 {
		filter = bson.D{{Key: "$and", Value: and}}
	}
	cur, err := s.coll.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "_id", Value: 1}}).
		SetLimit(int64(f.PageLimit())))
	if err != nil {
		return nil, wrap("list", err)
	}
	var docs []recordDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, wrap("list", err)
	}
	out := make([]idem.Record, 0, len(docs))
	for _, d := range docs {
		r, err := d.record()
		if err != nil {
			return nil, wrap("list", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Stats implements idem.Inspector with three aggregations (counts per
// scope and state, stale in-progress records per scope, expired records
// per scope by the sweep's condition) and one find per scope with records
// in progress (the oldest: $min in $group is not on every server, FerretDB
// v1 has none). Each reads the whole collection, or the part its $match
// selects: meant for operators, not request paths.
func (s *Store) Stats(ctx context.Context, now time.Time) ([]idem.ScopeStats, error) {
	by := map[string]*idem.ScopeStats{}
	get := func(scope string) *idem.ScopeStats {
		st := by[scope]
		if st == nil {
			st = &idem.ScopeStats{Scope: scope}
			by[scope] = st
		}
		return st
	}
	var states []struct {
		ID struct {
			Scope string `bson:"scope"`
			State string `bson:"state"`
		} `bson:"_id"`
		N int64 `bson:"n"`
	}
	if err := s.aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: bson.D{{Key: "scope", Value: "$" + fScope}, {Key: "state", Value: "$" + fState}}},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
		}}},
	}, &states); err != nil {
		return nil, err
	}
	for _, g := range states {
		st := get(g.ID.Scope)
		switch idem.State(g.ID.State) {
		case idem.StateInProgress:
			st.InProgress += g.N
		case idem.StateCompleted:
			st.Completed += g.N
		case idem.StateReleased:
			st.Released += g.N
		}
	}
	now = ms(now)
	for _, c := range []struct {
		match bson.D
		add   func(st *idem.ScopeStats, n int64)
	}{
		{bson.D{{Key: fState, Value: string(idem.StateInProgress)}, {Key: fLeaseUntil, Value: bson.D{{Key: "$lte", Value: now}}}},
			func(st *idem.ScopeStats, n int64) { st.Stale += n }},
		{expiredAt(now), func(st *idem.ScopeStats, n int64) { st.Expired += n }},
	} {
		var counts []struct {
			Scope string `bson:"_id"`
			N     int64  `bson:"n"`
		}
		if err := s.aggregate(ctx, mongo.Pipeline{
			{{Key: "$match", Value: c.match}},
			{{Key: "$group", Value: bson.D{{Key: "_id", Value: "$" + fScope}, {Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}}}}},
		}, &counts); err != nil {
			return nil, err
		}
		for _, g := range counts {
			c.add(get(g.Scope), g.N)
		}
	}
	out := make([]idem.ScopeStats, 0, len(by))
	for _, st := range by {
		if st.InProgress > 0 {
			var d recordDoc
			err := s.coll.FindOne(ctx,
				bson.D{{Key: fScope, Value: st.Scope}, {Key: fState, Value: string(idem.StateInProgress)}},
				options.FindOne().SetSort(bson.D{{Key: fCreatedAt, Value: 1}})).Decode(&d)
			if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
				return nil, wrap("stats", err)
			}
			st.OldestInProgress = d.CreatedAt
		}
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Scope < out[j].Scope })
	return out, nil
}

func (s *Store) aggregate(ctx context.Context, p mongo.Pipeline, into any) error {
	cur, err := s.coll.Aggregate(ctx, p)
	if err != nil {
		return wrap("stats", err)
	}
	return wrap("stats", cur.All(ctx, into))
}
