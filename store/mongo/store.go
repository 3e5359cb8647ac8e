package mongoidem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// Store is an idem.Store on a MongoDB-API server. It is safe for concurrent
// use; create one per database and collection with New.
type Store struct {
	db    *mongo.Database
	coll  *mongo.Collection
	locks *mongo.Collection
	turns *mongo.Collection // the right to write a record on FerretDB v1 (turns.go)
	opts  Options
	clock serverClock
	txs   txRunner

	ttlState ttlState // what Migrate found (Store.TTL)
}

var (
	_ idem.Store                   = (*Store)(nil)
	_ storekit.BatchStore          = (*Store)(nil)
	_ idem.Inspector               = (*Store)(nil)
	_ idem.TxStore[*mongo.Session] = (*Store)(nil)
)

// New returns a store keeping its records in db's collection
// opts.Collection. It checks the names and does not contact the server;
// call Migrate once (from any number of instances) to create the indexes.
func New(db *mongo.Database, opts Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mongoidem: nil database", idem.ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	if err := opts.validate(db.Name()); err != nil {
		return nil, err
	}
	coll := db.Collection(opts.Collection)
	s := &Store{
		db:    db,
		coll:  coll,
		locks: db.Collection(opts.Collection + ".locks"),
		turns: db.Collection(opts.Collection + ".turns"),
		opts:  opts,
		clock: serverClock{db: db},
		txs:   txRunner{client: db.Client(), probe: coll},
	}
	return s, nil
}

// Collection returns the records collection.
func (s *Store) Collection() *mongo.Collection { return s.coll }

// Database returns the store's database.
func (s *Store) Database() *mongo.Database { return s.db }

// ttl is the ttl_at to write for a record whose retention ends at until, or
// nil when the store writes none (TTLNone).
func (s *Store) ttl(ctx context.Context, now, until time.Time) (*time.Time, error) {
	if s.opts.TTLIndex == TTLNone {
		return nil, nil
	}
	t, err := s.clock.ttlAt(ctx, now, until)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// maxClaimRounds bounds how often a claim of an existing key reads the
// record again after another writer changed it between the read and the
// conditional write. Each round means another claim, completion, release
// or renewal of the key landed in between; a few rounds is already rare.
const maxClaimRounds = 64

// Claim implements idem.Store. A new key is one insert of the fresh
// in-progress record. When the key exists (duplicate key, code 11000), the
// claim reads the record, decides with storekit.ApplyClaim, and when that
// calls for a write (expired, released, stale retake) replaces the record
// only if the token, state, lease end and expiry it read are still there:
// one conditional write, atomic at the server. If another writer came in
// between, the replace matches nothing and the claim reads again.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	if err := checkTimes("claim", req.Now, req.LeaseUntil, req.ExpiresAt); err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	fresh, doc, err := s.freshClaim(ctx, req)
	if err != nil {
		return idem.Claim{}, wrap("claim", err)
	}
	if _, err := s.coll.InsertOne(ctx, doc); err == nil {
		return fresh, nil
	} else if !mongo.IsDuplicateKeyError(err) {
		return idem.Claim{}, wrap("claim", err)
	}
	c, err := s.claimExisting(ctx, req, doc, nil)
	return c, wrap("claim", err)
}

// freshClaim is the claim of req for an absent key and its document.
func (s *Store) freshClaim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, recordDoc, error) {
	c, _ := storekit.ApplyClaim(nil, req)
	c.Record = withMS(c.Record)
	ttl, err := s.ttl(ctx, req.Now, c.Record.ExpiresAt)
	if err != nil {
		return idem.Claim{}, recordDoc{}, err
	}
	return c, docOf(c.Record, ttl), nil
}

// claimExisting claims req's key, which exists (or did a moment ago). cur is
// the record's document when the caller has read it already. fresh is the
// document to insert should the record be gone by the time it is read.
func (s *Store) claimExisting(ctx context.Context, req idem.ClaimRequest, fresh recordDoc, cur *recordDoc) (idem.Claim, error) {
	id := idOf(req.Key)
	var readAt time.Time // when cur was read; zero: by the caller, read again before a turn
	for range maxClaimRounds {
		if cur == nil {
			readAt = time.Now()
			var d recordDoc
			err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
			if errors.Is(err, mongo.ErrNoDocuments) {
				// Swept or expired by the server in between: a new lifetime.
				if _, err := s.coll.InsertOne(ctx, fresh); err == nil {
					r, rerr := fresh.record()
					return idem.Claim{Outcome: idem.ClaimAcquired, Record: r}, rerr
				} else if !mongo.IsDuplicateKeyError(err) {
					return idem.Claim{}, err
				}
				continue
			}
			if err != nil {
				return idem.Claim{}, err
			}
			cur = &d
		}
		rec, err := cur.record()
		if err != nil {
			return idem.Claim{}, err
		}
		c, write := storekit.ApplyClaim(&rec, req)
		if !write {
			return c, nil
		}
		c.Record = withMS(c.Record)
		ttl, err := s.ttl(ctx, req.Now, c.Record.ExpiresAt)
		if err != nil {
			return idem.Claim{}, err
		}
		doc := docOf(c.Record, ttl)
		ok, err := s.writeIf(ctx, id, unchanged(*cur), cur, readAt, func(ctx context.Context, filter bson.D, rev string) (int64, error) {
			doc.Rev = rev
			res, err := s.coll.ReplaceOne(ctx, filter, doc)
			if err != nil {
				return 0, err
			}
			return res.MatchedCount, nil
		})
		if err != nil {
			return idem.Claim{}, err
		}
		if ok {
			return c, nil
		}
		cur = nil // changed under us: read again
	}
	return idem.Claim{}, fmt.Errorf("the record of %s changed %d times during one claim; retry", req.Key, maxClaimRounds)
}

// fenced runs one update of the record of k held in progress under token,
// and returns idem.ErrLeaseLost when there is no such record.
func (s *Store) fenced(ctx context.Context, op string, k idem.Key, token int64, update bson.D) error {
	ok, err := s.writeIf(ctx, idOf(k), heldBy(token), nil, time.Time{}, func(ctx context.Context, filter bson.D, rev string) (int64, error) {
		res, err := s.coll.UpdateOne(ctx, filter, setRev(update, rev))
		if err != nil {
			return 0, err
		}
		return res.MatchedCount, nil
	})
	if err != nil {
		return wrap(op, err)
	}
	if !ok {
		return idem.ErrLeaseLost
	}
	return nil
}

// resultOverhead is room for the rest of a record beside its result: the
// ids (up to 200 + 200 bytes), the display id and fingerprint (up to 1024
// each), the field names and fixed-size fields.
const resultOverhead = 4 << 10

// checkResult refuses a result that would take the record past the server's
// document size limit, as invalid data: the same result would be refused
// on every retry.
func (s *Store) checkResult(op string, result []byte) error {
	if limit := s.clock.maxDocument(); len(result)+resultOverhead > limit {
		return &idem.InvalidDataError{Op: op, Err: &tooLargeError{Size: len(result) + resultOverhead, Limit: limit}}
	}
	return nil
}

// ResultLimit is the size in bytes of the largest result the store records:
// the server's document size limit (measured from the server) less the room
// the rest of a record takes. Complete and SaveResult refuse a larger one
// with an *idem.InvalidDataError, nothing written; keep the guard's
// MaxResultSize under it.
func (s *Store) ResultLimit(ctx context.Context) (int, error) {
	if err := s.clock.measure(ctx); err != nil {
		return 0, wrap("result limit", err)
	}
	return s.clock.maxDocument() - resultOverhead, nil
}

// Complete implements idem.Store: one update fenced by token and state.
func (s *Store) Complete(ctx context.Context, req idem.CompleteRequest) error {
	req, err := storekit.PrepareComplete(req)
	if err != nil {
		return err
	}
	if err := checkTimes("complete", req.Now, req.ExpiresAt); err != nil {
		return err
	}
	if err := s.checkResult("complete", req.Result); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	set := bson.D{
		{Key: fState, Value: string(idem.StateCompleted)},
		{Key: fExpiresAt, Value: ms(req.ExpiresAt)},
		{Key: fUpdatedAt, Value: ms(req.Now)},
	}
	ttl, err := s.ttl(ctx, req.Now, req.ExpiresAt)
	if err != nil {
		return wrap("complete", err)
	}
	if ttl != nil {
		set = append(set, bson.E{Key: fTTLAt, Value: *ttl})
	}
	unset := bson.D{{Key: fTTLHold, Value: ""}} // settled: ttl_at from now on
	if len(req.Result) > 0 {
		set = append(set, bson.E{Key: fResult, Value: req.Result})
	} else {
		unset = append(unset, bson.E{Key: fResult, Value: ""})
	}
	update := bson.D{{Key: "$unset", Value: unset}, {Key: "$set", Value: set}}
	return s.fenced(ctx, "complete", req.Key, req.Token, update)
}

// Release implements idem.Store: state released, lease ended at Now; the
// token, fingerprint and expiry stay. The record, settled, takes the TTL
// its claim and renewals held for it (ttl_hold becomes ttl_at).
func (s *Store) Release(ctx context.Context, req idem.ReleaseRequest) error {
	req, err := storekit.PrepareRelease(req)
	if err != nil {
		return err
	}
	if err := checkTimes("release", req.Now); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fenced(ctx, "release", req.Key, req.Token, bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fState, Value: string(idem.StateReleased)},
			{Key: fLeaseUntil, Value: ms(req.Now)},
			{Key: fUpdatedAt, Value: ms(req.Now)},
		}},
		{Key: "$rename", Value: bson.D{{Key: fTTLHold, Value: fTTLAt}}},
	})
}

// Renew implements idem.Store: the lease moves to LeaseUntil, and the
// expiry (and the held ttl_hold) to at least that ($max), in one fenced
// update. The record, in progress, carries no ttl_at (one written by an
// older version is removed), so the TTL index never deletes it.
func (s *Store) Renew(ctx context.Context, req idem.RenewRequest) error {
	req, err := storekit.PrepareRenew(req)
	if err != nil {
		return err
	}
	if err := checkTimes("renew", req.Now, req.LeaseUntil); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	maxes := bson.D{{Key: fExpiresAt, Value: ms(req.LeaseUntil)}}
	ttl, err := s.ttl(ctx, req.Now, req.LeaseUntil)
	if err != nil {
		return wrap("renew", err)
	}
	if ttl != nil {
		maxes = append(maxes, bson.E{Key: fTTLHold, Value: *ttl})
	}
	return s.fenced(ctx, "renew", req.Key, req.Token, bson.D{
		{Key: "$set", Value: bson.D{
			{Key: fLeaseUntil, Value: ms(req.LeaseUntil)},
			{Key: fUpdatedAt, Value: ms(req.Now)},
		}},
		{Key: "$max", Value: maxes},
		{Key: "$unset", Value: bson.D{{Key: fTTLAt, Value: ""}}},
	})
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	var d recordDoc
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: idOf(k)}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, wrap("get", err)
	}
	r, err := d.record()
	return r, wrap("get", err)
}
