// Package mongoidem is an idem store on the MongoDB API
// (go.mongodb.org/mongo-driver/v2): MongoDB, Azure Cosmos DB for MongoDB,
// Amazon DocumentDB, FerretDB. Two-phase records with leases and fencing
// tokens, one document per key; a transactional inbox on session
// transactions where the server has them; entity mode on documents
// (Entities, Versioned, EntityInbox), the pattern of Azure's Cosmos DB
// example; and the Inspector. Store implements idem.Store,
// storekit.BatchStore, idem.Inspector and idem.TxStore[*mongo.Session].
//
// The package lives in store/mongo but is named mongoidem, so that it can
// be imported next to the driver's package mongo without an alias:
//
//	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:27017/"))
//	...
//	store, err := mongoidem.New(client.Database("shop"), mongoidem.Options{Collection: "idem_records"})
//	if err != nil { ... }                             // a bad name: mongoidem.ErrInvalidName
//	if err := store.Migrate(ctx); err != nil { ... } // the indexes; idempotent, safe from every instance
//	g, err := idem.New(store, idem.Options{Scope: "mailer"})
//	res, err := g.Do(ctx, msg, sendMail)             // two-phase: side effects outside the database
//	go (&idem.Sweeper{Store: store}).Run(ctx)        // where the server has no TTL index (FerretDB)
//
// The guide, with the documents, atomicity, expiry, what was tested where and sizing:
// https://github.com/idemgo/idem/blob/main/docs/stores/mongo.md
//
// # Transactional inbox
//
// On a server with multi-document transactions (a MongoDB replica set or
// sharded cluster, Cosmos DB for MongoDB, DocumentDB), idem.DoTx runs the
// handler in a session transaction (snapshot reads, majority commit) with
// the marker: the handler writes with the context it is given, which
// carries the session, and its writes and the marker commit together or
// not at all.
//
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *mongo.Session) ([]byte, error) {
//		_, err := charges.InsertOne(ctx, bson.D{{"_id", orderID}, {"amount", amount}}) // ctx carries the session
//		return nil, err
//	})
//
// Mark is an upsert that sets the marker's fields only on insert
// ($setOnInsert), so a key that exists is matched and left alone instead
// of failing with a duplicate key (which aborts a MongoDB transaction); an
// existing record is read in the transaction and storekit.ApplyMark decides.
// Two transactions marking one key meet a write conflict, and the driver
// runs the later one again after the first ends, when it sees the marker
// (idem.DoTx may run the handler's function more than once).
//
// A server without multi-document transactions (FerretDB v1, a standalone
// MongoDB) is found out at the first use: a probe transaction (one read
// and a commit) is refused, and InTx returns a *NoTransactionsError
// without running the function, from then on. It wraps ErrNoTransactions,
// idem.ErrNoTx and idem.ErrPermanent (the wiring must change, so messages
// are dead-lettered, not retried for ever). SupportsTransactions asks the
// same question at startup. Use entity mode there (one document per
// message, EntityInbox with NoTransaction) or two-phase records.
//
// # Entity mode on documents
//
// When a message creates one business document whose natural id is the
// message's key (an order keyed by its order id), the document is the
// record: Entities.Insert inserts it with _id = the key and the message's
// fingerprint in a field, and on a duplicate key reads the stored
// fingerprint, returning *idem.DuplicateError (same content: ack) or
// *idem.ConflictError (other content: dead-letter). Versioned.Apply is the
// version guard, one conditional update with upsert ({_id, version: {$lt:
// v}}): older or equal versions return an error wrapping
// idem.ErrSuperseded. EntityInbox gives idem.NewInbox a store for them,
// with or without transactions; its Mark always acquires and writes
// nothing, so the insert decides:
//
//	inbox, _ := mongoidem.NewEntityInbox(db, mongoidem.EntityInboxOptions{NoTransaction: true})
//	g, _ := idem.NewInbox(inbox, idem.Options{Scope: "orders"})
//	orders := &mongoidem.Entities{Collection: db.Collection("orders"), Scope: "orders"}
//	idem.DoTx(ctx, g, msg, func(ctx context.Context, _ *mongo.Session) ([]byte, error) {
//		return nil, orders.Insert(ctx, orderID, fingerprint, order)
//	})
//
// With NoTransaction the function must make the insert its one write (or
// its last): nothing undoes an earlier write when a later step fails.
// examples/cosmos-orders runs this behind NATS JetStream.
//
// # Errors
//
// Options errors wrap ErrInvalidName (database and collection names:
// letters, digits, _ and -, and dots in collection names; nothing the
// server could read as another namespace) and idem.ErrInvalidOptions.
// Data the server cannot take is an *idem.InvalidDataError naming the
// operation: a result that would take the record past the server's
// document limit (16 MiB; refused before it is sent, since FerretDB v1
// would store it), a document the server refuses (BadValue,
// BSONObjectTooLarge, ...), a document at a record's _id that is not a
// record. Caller data is data: scopes, ids and entity keys are strings,
// matched by equality; Versioned.Apply refuses an id the server would read
// as query syntax (a document with a "$" key at any depth, such as
// {"$gt": ""} decoded from JSON into any; a regular expression; an array),
// and Apply and Entities.Insert refuse fields whose names begin with "$",
// as an *idem.InvalidDataError wrapping ErrOperatorValue. Everything else
// the server or the network returns (down, timeouts, not primary, write
// conflicts) is wrapped with the operation's name and is retryable; the
// driver's error stays reachable.
package mongoidem
