package mongoidem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// ErrNoTransactions means the server has no multi-document transactions
// (a standalone MongoDB, FerretDB v1), so there is no transactional inbox
// on it. See NoTransactionsError.
var ErrNoTransactions = errors.New("mongoidem: the server has no multi-document transactions")

// NoTransactionsError is the answer of InTx (and so idem.DoTx, MarkTx and
// the broker integrations' transactional handlers) on a server without
// multi-document transactions, from the first use on. It unwraps to
// ErrNoTransactions, idem.ErrNoTx and idem.ErrPermanent (the wiring, not
// the message, must change: a message is dead-lettered rather than retried
// for ever), and to the server's own answer.
type NoTransactionsError struct {
	Server string // what the server says it is ("FerretDB v1.24.2", "MongoDB 7.0.12")
	Err    error  // the server's answer to a transaction
}

// Error says what to use instead.
func (e *NoTransactionsError) Error() string {
	return fmt.Sprintf("mongoidem: %s has no multi-document transactions, so no transactional inbox: "+
		"use entity mode (EntityInbox with NoTransaction, the business document keyed by the message) "+
		"or two-phase records (idem.Guard.Do), or a MongoDB replica set [%v]", e.Server, e.Err)
}

// Unwrap returns ErrNoTransactions, idem.ErrNoTx, idem.ErrPermanent and the
// server's answer.
func (e *NoTransactionsError) Unwrap() []error {
	return []error{ErrNoTransactions, idem.ErrNoTx, idem.ErrPermanent, e.Err}
}

// unsupportedTxCodes are the server's answers to a transaction it cannot
// run: IllegalOperation (a standalone MongoDB: "Transaction numbers are
// only allowed on a replica set member or mongos"), FailedToParse
// (FerretDB v1: "unknown field startTransaction"), CommandNotFound,
// CommandNotSupported, NotImplemented.
var unsupportedTxCodes = []int{20, 9, 59, 115, 238}

// txRunner runs session transactions, after finding out once whether the
// server has them.
type txRunner struct {
	client *mongo.Client
	probe  *mongo.Collection // read in the probe transaction

	mu    sync.Mutex
	known bool
	noTx  *NoTransactionsError // nil: the server has transactions
}

// check finds out whether the server runs transactions: a transaction
// reading one document of the probe collection, aborted. The answer is
// kept; a failure to reach the server is returned and asked again next
// time.
func (r *txRunner) check(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known {
		if r.noTx != nil {
			return r.noTx
		}
		return nil
	}
	sess, err := r.client.StartSession()
	if err != nil {
		return fmt.Errorf("mongoidem: start session: %w", err)
	}
	defer sess.EndSession(ctx)
	if err := sess.StartTransaction(); err != nil {
		return fmt.Errorf("mongoidem: start transaction: %w", err)
	}
	sctx := mongo.NewSessionContext(ctx, sess)
	// A read and a commit: FerretDB v1 ignores the transaction fields of
	// a find and answers the commit with CommandNotFound; a standalone
	// MongoDB refuses the find.
	err = r.probe.FindOne(sctx, bson.D{{Key: "_id", Value: "idem-transaction-probe"}}).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = sess.CommitTransaction(ctx)
	} else {
		_ = sess.AbortTransaction(context.WithoutCancel(ctx))
	}
	switch {
	case err == nil:
		r.known = true
		return nil
	case hasCode(err, unsupportedTxCodes...):
		r.known = true
		r.noTx = &NoTransactionsError{Server: serverName(ctx, r.client), Err: err}
		return r.noTx
	}
	return fmt.Errorf("mongoidem: transaction probe: %w", err)
}

// serverName is what buildInfo says the server is, for messages.
func serverName(ctx context.Context, c *mongo.Client) string {
	var bi struct {
		Version  string `bson:"version"`
		FerretDB string `bson:"ferretdbVersion"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		return "the server"
	}
	if bi.FerretDB != "" {
		return "FerretDB " + bi.FerretDB
	}
	return "MongoDB " + bi.Version + " (standalone)"
}

// txOptions: snapshot reads and majority writes, so what the transaction
// read is what it commits against.
var txOptions = options.Transaction().
	SetReadConcern(readconcern.Snapshot()).
	SetWriteConcern(writeconcern.Majority())

// run runs fn in a session transaction, committed when fn returns nil.
// The driver runs fn again on a transient transaction error (a write
// conflict with a concurrent transaction on the same document, a failover)
// and retries a commit whose result is unknown.
func (r *txRunner) run(ctx context.Context, fn func(ctx context.Context, sess *mongo.Session) error) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	sess, err := r.client.StartSession()
	if err != nil {
		return fmt.Errorf("mongoidem: start session: %w", err)
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	_, err = sess.WithTransaction(ctx, func(sctx context.Context) (any, error) {
		return nil, fn(sctx, sess)
	}, txOptions)
	return err
}

// SupportsTransactions reports whether the server runs multi-document
// transactions, and so whether InTx (the transactional inbox) works: nil
// when it does, a *NoTransactionsError when it does not, another error
// when the server could not be asked. Call it at startup to fail early;
// InTx asks the same on first use.
func (s *Store) SupportsTransactions(ctx context.Context) error { return s.txs.check(ctx) }

// InTx implements idem.TxStore[*mongo.Session]: fn runs in a session
// transaction (snapshot reads, majority commit), committed when fn
// returns nil and aborted otherwise. fn's context carries the session:
// pass it to every collection call that must commit with the marker.
// The driver runs fn again after a transient transaction error, as when a
// concurrent transaction marked the same key first. On a server without
// transactions InTx returns a *NoTransactionsError, without running fn.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *mongo.Session) error) error {
	return s.txs.run(ctx, fn)
}

// Mark implements idem.TxStore[*mongo.Session]. The marker goes in with an
// upsert that only sets fields on insert ($setOnInsert), so a key that
// exists is matched and left as it is: no duplicate-key error, which would
// abort the transaction. A new key costs that one statement. For an
// existing key the record is read in the transaction and storekit.ApplyMark
// decides; a write (expired or released record) replaces it conditionally,
// as Claim does. A concurrent transaction marking the same key meets a
// write conflict, and the driver runs it again after this one ends, when it
// sees the marker.
func (s *Store) Mark(ctx context.Context, tx *mongo.Session, req idem.ClaimRequest) (idem.Claim, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return idem.Claim{}, err
	}
	if err := checkTimes("mark", req.Now, req.LeaseUntil, req.ExpiresAt); err != nil {
		return idem.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return idem.Claim{}, err
	}
	sctx := mongo.NewSessionContext(ctx, tx)
	c, _ := storekit.ApplyMark(nil, req)
	c.Record = withMS(c.Record)
	ttl, err := s.ttl(ctx, req.Now, c.Record.ExpiresAt)
	if err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	fresh := docOf(c.Record, ttl)
	onInsert, err := withoutID(fresh)
	if err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	res, err := s.coll.UpdateOne(sctx, bson.D{{Key: "_id", Value: fresh.ID}},
		bson.D{{Key: "$setOnInsert", Value: onInsert}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	if res.UpsertedCount == 1 {
		return c, nil
	}
	var cur recordDoc
	if err := s.coll.FindOne(sctx, bson.D{{Key: "_id", Value: fresh.ID}}).Decode(&cur); err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	rec, err := cur.record()
	if err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	c, write := storekit.ApplyMark(&rec, req)
	if !write {
		return c, nil
	}
	c.Record = withMS(c.Record)
	if ttl, err = s.ttl(ctx, req.Now, c.Record.ExpiresAt); err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	rr, err := s.coll.ReplaceOne(sctx, append(bson.D{{Key: "_id", Value: cur.ID}}, unchanged(cur).filter...), docOf(c.Record, ttl))
	if err != nil {
		return idem.Claim{}, wrap("mark", err)
	}
	if rr.MatchedCount != 1 {
		return idem.Claim{}, fmt.Errorf("mongoidem: mark: the record of %s changed inside the transaction; retry", req.Key)
	}
	return c, nil
}

// SaveResult implements idem.TxStore[*mongo.Session]: the result goes on
// the marker Mark wrote in the same transaction.
func (s *Store) SaveResult(ctx context.Context, tx *mongo.Session, k idem.Key, result []byte) error {
	if err := s.checkResult("save result", result); err != nil {
		return err
	}
	_, err := s.coll.UpdateOne(mongo.NewSessionContext(ctx, tx), bson.D{{Key: "_id", Value: idOf(k)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fResult, Value: result}}}})
	return wrap("save result", err)
}

// withoutID is d as a document without its _id, for $setOnInsert (the
// upsert takes the _id from the filter).
func withoutID(d recordDoc) (bson.D, error) {
	raw, err := bson.Marshal(d)
	if err != nil {
		return nil, err
	}
	var all bson.D
	if err := bson.Unmarshal(raw, &all); err != nil {
		return nil, err
	}
	out := all[:0]
	for _, e := range all {
		if e.Key != "_id" {
			out = append(out, e)
		}
	}
	return out, nil
}
