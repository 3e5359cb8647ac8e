package bench

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	mongoidem "github.com/idemgo/idem/store/mongo"
)

// mongoBaseline inserts small documents with a string _id into a collection
// of its own beside the records, and drops it at the end.
func mongoBaseline(s *mongoidem.Store, runID string) *baseline {
	coll := s.Database().Collection("idem_bench_baseline_" + runID)
	id := func(w, i, j int) string { return fmt.Sprintf("%d-%d-%d", w, i, j) }
	return &baseline{
		name:     "insertOne of {_id, v}",
		manyName: "insertMany of {_id, v}, unordered",
		one: func(ctx context.Context, w, i int) (int, error) {
			_, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id(w, i, 0)}, {Key: "v", Value: 1}})
			return 1, err
		},
		many: func(ctx context.Context, w, i, n int) error {
			docs := make([]any, n)
			for j := range docs {
				docs[j] = bson.D{{Key: "_id", Value: id(w, i, j)}, {Key: "v", Value: 1}}
			}
			_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
			return err
		},
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = coll.Drop(ctx)
		},
	}
}
