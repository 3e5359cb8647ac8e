package mongoidem

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/store/storekit"
)

// DefaultFingerprintField is the field Entities keeps a message's
// fingerprint in when FingerprintField is empty.
const DefaultFingerprintField = "idem_fingerprint"

// Entities is a collection of business documents keyed by the message
// that created them: entity mode on documents, as the seed's Cosmos DB
// example keeps its orders. The document's _id is the business key (the
// order id), so creating it is the claim: the server's unique _id index
// lets exactly one insert of a key in, with no record beside it.
type Entities struct {
	// Collection holds the business documents.
	Collection *mongo.Collection
	// FingerprintField holds the fingerprint of the message that created
	// the document (default "idem_fingerprint").
	FingerprintField string
	// Scope is used in the errors' keys (logs and dead letters).
	Scope string
}

func (e *Entities) field() string {
	if e.FingerprintField == "" {
		return DefaultFingerprintField
	}
	return e.FingerprintField
}

// Insert inserts doc (a bson.D, a bson.M, or a struct the driver encodes;
// without an _id) as the document with _id key and the fingerprint in
// FingerprintField. When a document with this _id exists (the server's
// duplicate key error, code 11000), Insert reads its fingerprint and
// returns *idem.DuplicateError when it is the same (the message was
// processed: ack) and *idem.ConflictError when it differs (the key was
// reused with other content: dead-letter and alert, never dropped).
// Otherwise nil: the document is in.
//
// Inside a transaction (ctx carrying a session in one) a duplicate key
// aborts the transaction, as the server does with any failed write in
// one; Insert reads the stored fingerprint outside it, and the caller's
// function returns the error, which rolls the rest back. A concurrent
// transaction inserting the same key meets a write conflict and is run
// again by the driver, then finds the document. Data the server cannot take
// (a document over its size limit) is an *idem.InvalidDataError.
func (e *Entities) Insert(ctx context.Context, key, fingerprint string, doc any) error {
	if e.Collection == nil {
		return fmt.Errorf("%w: mongoidem: Entities without a Collection", idem.ErrInvalidOptions)
	}
	if key == "" {
		return &idem.KeyError{Reason: "entity key is empty", Err: idem.ErrNoKey}
	}
	fingerprint = storekit.StoredFingerprint(fingerprint)
	d, err := toD(doc)
	if err != nil {
		return &idem.InvalidDataError{Op: "insert", Err: err}
	}
	if err := checkFieldNames("insert", d); err != nil {
		return err
	}
	full := make(bson.D, 0, len(d)+2)
	full = append(full, bson.E{Key: "_id", Value: key})
	for _, el := range d {
		if el.Key == "_id" || el.Key == e.field() {
			return &idem.InvalidDataError{Op: "insert",
				Err: fmt.Errorf("mongoidem: the document sets %s, which Insert sets itself (to the key and the fingerprint)", el.Key)}
		}
		full = append(full, el)
	}
	full = append(full, bson.E{Key: e.field(), Value: fingerprint})
	if err := checkSize(full); err != nil {
		return &idem.InvalidDataError{Op: "insert", Err: err}
	}
	_, err = e.Collection.InsertOne(ctx, full)
	if err == nil {
		return nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return wrap("insert", err)
	}
	// Read outside any transaction: the duplicate key aborted it.
	var stored bson.M
	rctx := mongo.NewSessionContext(ctx, nil)
	err = e.Collection.FindOne(rctx, bson.D{{Key: "_id", Value: key}},
		options.FindOne().SetProjection(bson.D{{Key: e.field(), Value: 1}})).Decode(&stored)
	k := idem.Key{Scope: e.Scope, ID: key}
	if errors.Is(err, mongo.ErrNoDocuments) {
		return fmt.Errorf("mongoidem: insert of %s met a document that is gone; retry", k)
	}
	if err != nil {
		return wrap("insert", err)
	}
	sfp, _ := stored[e.field()].(string)
	if sfp != fingerprint && sfp != "" && fingerprint != "" {
		return &idem.ConflictError{Key: k, Fingerprint: fingerprint, Record: idem.Record{
			Scope: e.Scope, ID: key, DisplayID: key, State: idem.StateCompleted, Fingerprint: sfp,
		}}
	}
	return &idem.DuplicateError{}
}

// Versioned is a collection of documents updated by state-transfer
// messages that carry an increasing version: a version guard on
// documents. Every document carries VersionField.
type Versioned struct {
	Collection   *mongo.Collection
	VersionField string // default "version"
}

func (v *Versioned) field() string {
	if v.VersionField == "" {
		return "version"
	}
	return v.VersionField
}

// Apply writes set (a bson.D, bson.M or struct of the fields to set) and
// the version to the document with _id id, in one conditional update:
// {_id: id, version: {$lt: version}} with upsert, so the document is
// inserted when absent and updated only when its stored version is older.
// An older or equal version matches nothing, and the upsert's insert then
// meets the existing _id (duplicate key): Apply checks once more without
// upsert (a concurrent Apply may have inserted an older version between),
// and returns an error wrapping idem.ErrSuperseded when nothing older is
// stored (ack and skip).
func (v *Versioned) Apply(ctx context.Context, id any, version int64, set any) error {
	if v.Collection == nil {
		return fmt.Errorf("%w: mongoidem: Versioned without a Collection", idem.ErrInvalidOptions)
	}
	if err := checkIDValue("apply", id); err != nil {
		return err
	}
	d, err := toD(set)
	if err != nil {
		return &idem.InvalidDataError{Op: "apply", Err: err}
	}
	if err := checkFieldNames("apply", d); err != nil {
		return err
	}
	fields := make(bson.D, 0, len(d)+1)
	for _, el := range d {
		if el.Key == "_id" || el.Key == v.field() {
			return &idem.InvalidDataError{Op: "apply", Err: fmt.Errorf("mongoidem: the update sets %s, which Apply sets itself", el.Key)}
		}
		fields = append(fields, el)
	}
	fields = append(fields, bson.E{Key: v.field(), Value: version})
	filter := bson.D{{Key: "_id", Value: id}, {Key: v.field(), Value: bson.D{{Key: "$lt", Value: version}}}}
	update := bson.D{{Key: "$set", Value: fields}}
	if serialFor(ctx, v.Collection.Database().Client()) {
		return v.applySerial(ctx, id, version, fields, update)
	}
	_, err = v.Collection.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	if err == nil {
		return nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return wrap("apply", err)
	}
	res, err := v.Collection.UpdateOne(ctx, filter, update)
	if err != nil {
		return wrap("apply", err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%s %v at version %d: %w", v.Collection.Name(), id, version, idem.ErrSuperseded)
	}
	return nil
}

// applySerial is Apply on FerretDB v1, whose conditional writes are not
// atomic and whose only indexed filter is _id alone: under the document's
// lock, read it by _id, compare the version in Go, and insert or update by
// _id.
func (v *Versioned) applySerial(ctx context.Context, id any, version int64, fields, update bson.D) error {
	defer lockDoc(ctx, v.Collection, id)()
	for range 2 {
		var stored bson.M
		err := v.Collection.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&stored)
		if errors.Is(err, mongo.ErrNoDocuments) {
			_, err := v.Collection.InsertOne(ctx, append(bson.D{{Key: "_id", Value: id}}, fields...))
			if mongo.IsDuplicateKeyError(err) {
				continue // another process inserted it: compare with it
			}
			return wrap("apply", err)
		}
		if err != nil {
			return wrap("apply", err)
		}
		if cur, ok := asInt64(stored[v.field()]); ok && cur >= version {
			return fmt.Errorf("%s %v at version %d: %w", v.Collection.Name(), id, version, idem.ErrSuperseded)
		}
		_, err = v.Collection.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update)
		return wrap("apply", err)
	}
	return fmt.Errorf("mongoidem: apply of %v: the document kept changing; retry", id)
}

// asInt64 is a stored version as an int64.
func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}

// toD is doc as a bson.D (nil: an empty one).
func toD(doc any) (bson.D, error) {
	switch d := doc.(type) {
	case nil:
		return bson.D{}, nil
	case bson.D:
		return d, nil
	}
	raw, err := bson.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	return d, nil
}

// checkSize refuses a document over MongoDB's 16 MiB limit before it is
// sent (FerretDB v1 stores larger ones).
func checkSize(d bson.D) error {
	raw, err := bson.Marshal(d)
	if err != nil {
		return err
	}
	if len(raw) > defaultMaxDocument {
		return &tooLargeError{Size: len(raw), Limit: defaultMaxDocument}
	}
	return nil
}

// EntityInboxOptions configure an EntityInbox.
type EntityInboxOptions struct {
	// NoTransaction runs each function without a server transaction, for
	// servers that have none (FerretDB v1, a standalone MongoDB). Only
	// for functions whose one write is the entity insert (Entities.Insert)
	// or version guard (Versioned.Apply), made last: without a
	// transaction nothing undoes an earlier write when a later step
	// fails, and the redelivery then finds the key taken.
	NoTransaction bool
}

// EntityInbox is the idem.TxStore for entity mode on documents: give it
// to idem.NewInbox, and the handler's Entities.Insert or Versioned.Apply
// is the only record, as entity.Store is for SQL tables. Mark writes
// nothing and acquires (the insert decides); SaveResult records nothing.
// It is not an idem.Store: with no record there is no lease or fencing,
// so a two-phase guard over it would deduplicate nothing.
type EntityInbox struct {
	entity.NoRecords[*mongo.Session]
	txs    txRunner
	client *mongo.Client
	noTx   bool
}

var _ idem.TxStore[*mongo.Session] = (*EntityInbox)(nil)

// NewEntityInbox returns the entity-mode inbox over db's client; db's
// collection "idem_txprobe" is read (never written) to find out whether the
// server has transactions.
func NewEntityInbox(db *mongo.Database, opts EntityInboxOptions) (*EntityInbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mongoidem: nil database", idem.ErrInvalidOptions)
	}
	return &EntityInbox{
		txs:    txRunner{client: db.Client(), probe: db.Collection("idem_txprobe")},
		client: db.Client(),
		noTx:   opts.NoTransaction,
	}, nil
}

// InTx runs fn in a session transaction, or with NoTransaction in a plain
// session (causally consistent, not a transaction). On a server without
// transactions, and without NoTransaction, it returns a
// *NoTransactionsError without running fn.
func (e *EntityInbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *mongo.Session) error) error {
	if !e.noTx {
		return e.txs.run(ctx, fn)
	}
	sess, err := e.client.StartSession()
	if err != nil {
		return fmt.Errorf("mongoidem: start session: %w", err)
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	return fn(mongo.NewSessionContext(ctx, sess), sess)
}
