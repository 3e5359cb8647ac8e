package mongoidem

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// ClaimBatch implements storekit.BatchStore. Every request is Prepare'd first
// (one that fails refuses the batch, nothing sent). The fresh records go in
// one unordered insertMany, each its own atomic insert; the keys that exist
// are read in one find and then claimed one by one as Claim does (a
// conditional replace where a write is due), so the new keys of a poll cost
// one round trip and its redeliveries one more.
func (s *Store) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	if err := storekit.CheckBatchKeys("claim batch", reqs); err != nil {
		return nil, err
	}
	prepared := make([]idem.ClaimRequest, len(reqs))
	for i, r := range reqs {
		p, err := storekit.PrepareClaim(r)
		if err != nil {
			return nil, err
		}
		if err := checkTimes("claim", p.Now, p.LeaseUntil, p.ExpiresAt); err != nil {
			return nil, err
		}
		prepared[i] = p
	}
	if len(prepared) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]idem.Claim, len(prepared))
	docs := make([]any, len(prepared))
	fresh := make([]recordDoc, len(prepared))
	for i, req := range prepared {
		c, d, err := s.freshClaim(ctx, req)
		if err != nil {
			return nil, wrap("claim", err)
		}
		out[i], fresh[i], docs[i] = c, d, d
	}
	_, err := s.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var existing []int
	if err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
			return nil, wrap("claim", err)
		}
		for _, we := range bwe.WriteErrors {
			if !mongo.IsDuplicateKeyError(we) {
				return nil, wrap("claim", we)
			}
			existing = append(existing, we.Index)
		}
	}
	if len(existing) == 0 {
		return out, nil
	}
	if serialFor(ctx, s.db.Client()) {
		// FerretDB v1 scans the collection for an $in of ids: read each
		// key by its _id instead.
		for _, i := range existing {
			c, err := s.claimExisting(ctx, prepared[i], fresh[i], nil)
			if err != nil {
				return nil, wrap("claim", fmt.Errorf("%s: %w", prepared[i].Key, err))
			}
			out[i] = c
		}
		return out, nil
	}
	ids := make(bson.A, len(existing))
	for j, i := range existing {
		ids[j] = idOf(prepared[i].Key)
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, wrap("claim", err)
	}
	var found []recordDoc
	if err := cur.All(ctx, &found); err != nil {
		return nil, wrap("claim", err)
	}
	byID := make(map[string]*recordDoc, len(found))
	for i := range found {
		byID[found[i].ID] = &found[i]
	}
	for _, i := range existing {
		req := prepared[i]
		c, err := s.claimExisting(ctx, req, fresh[i], byID[idOf(req.Key)])
		if err != nil {
			return nil, wrap("claim", fmt.Errorf("%s: %w", req.Key, err))
		}
		out[i] = c
	}
	return out, nil
}
