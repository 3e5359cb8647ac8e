package mongoidem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
)

// sweepLockTTL bounds how long a crashed sweeper keeps the others out. One
// Sweep call is one bounded find and one delete, far shorter.
const sweepLockTTL = time.Minute

// sweepLockID is the _id of the lock document in Collection + ".locks".
const sweepLockID = "sweep"

// Sweep implements idem.Store. With the TTL index in place the server
// deletes expired records itself and Sweep finds few; without it (FerretDB,
// TTLNone) Sweep is how records leave. Each call takes the sweep lock (a
// document in Collection+".locks" held for a minute by this process's
// clock; an instance that finds it held returns 0 at once), reads the ids
// of at most req.Limit records expired at req.Now through the expires_at
// index, and deletes those of them that are still expired, in one
// deleteMany whose filter repeats the expiry condition, so a record
// claimed again in between stays. An in-progress record, live or stale, is
// never expired (see the package doc). A Limit of zero or less deletes
// nothing and returns 0
// without contacting the server.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	if err := checkTimes("sweep", req.Now); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	unlock, ok, err := s.lockSweep(ctx)
	if err != nil || !ok {
		return 0, err
	}
	defer unlock()
	if serialFor(ctx, s.db.Client()) {
		// The turns no writer can still ask for (turns.go).
		if err := s.sweepTurns(ctx); err != nil {
			return 0, wrap("sweep", err)
		}
	}
	cur, err := s.coll.Find(ctx, expiredAt(req.Now), options.Find().
		SetProjection(bson.D{{Key: "_id", Value: 1}}).
		SetLimit(int64(req.Limit)))
	if err != nil {
		return 0, wrap("sweep", err)
	}
	var found []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return 0, wrap("sweep", err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	ids := make(bson.A, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	if serialFor(ctx, s.db.Client()) {
		// One key at a time, each through its turn (turns.go), so that a
		// claim's write cannot land between the server's check of the
		// expiry and its delete.
		n := 0
		for _, f := range found {
			ok, err := s.writeIf(ctx, f.ID, expired(req.Now), nil, time.Time{}, func(ctx context.Context, filter bson.D, _ string) (int64, error) {
				res, err := s.coll.DeleteOne(ctx, filter)
				if err != nil {
					return 0, err
				}
				return res.DeletedCount, nil
			})
			if err != nil {
				return n, wrap("sweep", err)
			}
			if ok {
				n++
			}
		}
		return n, nil
	}
	filter := append(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, expiredAt(req.Now)...)
	res, err := s.coll.DeleteMany(ctx, filter)
	if err != nil {
		return 0, wrap("sweep", err)
	}
	return int(res.DeletedCount), nil
}

// lockSweep takes the sweep lock: an upsert that matches the lock document
// only when it is free or its holder's minute is over. A held lock makes
// the upsert insert a second document with the same _id, which the server
// refuses (duplicate key): ok is false.
func (s *Store) lockSweep(ctx context.Context) (unlock func(), ok bool, err error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	owner := hex.EncodeToString(b[:])
	now := time.Now()
	_, err = s.locks.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: sweepLockID}, {Key: "until", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: now.Add(sweepLockTTL)}, {Key: "owner", Value: owner}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap("sweep lock", err)
	}
	return func() {
		// Unlock even if ctx was cancelled; the minute covers a failure.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = s.locks.DeleteOne(uctx, bson.D{{Key: "_id", Value: sweepLockID}, {Key: "owner", Value: owner}})
	}, true, nil
}
