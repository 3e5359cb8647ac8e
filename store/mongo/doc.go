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
// # Documents
//
// A record is one document of the collection:
//
//	{_id: "billing\x00order-42", scope: "billing", id: "order-42", state: "completed",
//	 fingerprint: "…", result: BinData, token: 4631…, attempts: 1, lease_until: ISODate,
//	 expires_at: ISODate, created_at: ISODate, updated_at: ISODate, ttl_at: ISODate}
//
// The _id is the key: the scope, a NUL byte and the stored id (neither
// holds a NUL, so the split is unambiguous), with scope and id repeated as
// plain fields for operators' queries. The server's own unique _id index
// makes a claim of a new key an insert that only one caller can win, costs
// no second index, and, NUL sorting before every other byte, orders
// records by scope, then stored id (bytewise), the order List pages in. A
// string _id is also what every server finds through its index (FerretDB
// v1 scans the whole collection for an _id that is a document). Ids over
// 200 bytes are stored as their "sha256:<hex>" digest
// (idem.Key.StoredID) with the original in display_id, which is absent
// otherwise. The result is omitted when empty. Times are BSON dates, at
// millisecond precision; a time a BSON date cannot hold is invalid data.
// Besides the _id index, Migrate creates one on expires_at (Sweep, Stats)
// and the TTL index on ttl_at (see Expiry).
// The sweep lock is a document of Collection + ".locks".
//
// # Atomicity
//
// Every step is one write that the server applies atomically to one
// document, conditional on the state the rules require:
//
//   - Claim inserts the fresh in-progress record (insertOne). When the key
//     exists (duplicate key, code 11000) it reads the record, decides with
//     storekit.ApplyClaim, and when a write is due (the record expired, was
//     released, or a stale lease is taken over) replaces the record with
//     a filter on the token, state, lease end and expiry it read: if any
//     changed meanwhile (another claim, a completion, release or
//     renewal), the replace matches nothing and the claim reads again. No
//     write ever lands on a record other than the one decided on. (One
//     update could not say "attempts + 1 here, attempts = 1 there" without
//     an aggregation-pipeline update, which FerretDB v1 and some Cosmos DB
//     versions lack; the conditional replace works everywhere.) A new key
//     costs one round trip, a duplicate two, a reclaim three.
//   - Complete, Release and Renew are one updateOne each, filtered on _id,
//     token and state in_progress; no match is idem.ErrLeaseLost.
//   - ClaimBatch inserts a poll's fresh records with one unordered
//     insertMany, reads the keys that exist with one find, and claims those
//     as Claim does.
//
// FerretDB v1 is an exception the store works around: it evaluates a
// conditional update, findAndModify or delete in its own process, reading
// the matching documents and then writing each by _id (its SQLite and
// PostgreSQL handlers alike), so two conditional writes racing on one
// document can both apply (measured on FerretDB v1.24.2: 2 and 19 of 64
// concurrent retakes of one stale record won; two processes got two
// winners for 21 of 64 stale keys, 11 of 64 released and 22 of 64
// expired). Its inserts are atomic. The store asks the server what it is
// once (buildInfo) and, on FerretDB 1.x, relies on inserts alone: every
// record carries a revision (rev, random, replaced by every write), and a
// write of an existing record (a reclaim, Complete, Release, Renew, a
// sweep's delete) reads it by _id, checks its condition in Go, takes the
// turn {_id: <record _id> NUL rev NUL 0}, an insert into Collection +
// ".turns" that one writer of that revision wins, and writes with a filter
// on _id alone (the only filter FerretDB v1 finds through its index). The
// losers read again. So any number of processes retaking one key get one
// owner with its own token, and a zombie's completion racing the retake
// is either the one write (the retake then finds a completed record) or
// refused with idem.ErrLeaseLost. Turns stay ten minutes (Sweep deletes
// older ones); a writer more than ten seconds between its read and its
// write gives up with a retryable error, and a turn whose writer died is
// skipped after a minute (safe unless the server holds a write that long
// before applying it). Shown on FerretDB v1.24.2 over SQLite by
// TestTwoProcessRace (store/mongo/internal/integration; two OS processes, 64 stale, released, expired and new
// keys: one winner each). Not shown: FerretDB's PostgreSQL handler (it
// refuses the NUL byte of the _id: jsonb holds no \u0000) and MongoDB,
// whose own conditional writes are atomic and get one filter, no turn.
// Versioned.Apply on FerretDB v1 is serialized within the process only:
// one process per collection of versioned documents there.
//
// # Record rules
//
// Claim, ClaimBatch (each request), Mark, Complete, Renew and Release call
// storekit's Prepare functions first: a request without its times is an
// *idem.InvalidDataError and nothing is sent; fingerprints that are not
// short text (raw digest bytes, NUL bytes, invalid UTF-8) are stored as
// their "sha256:" digest; ExpiresAt is raised to LeaseUntil.
//
//   - Tokens: a record the store creates takes the request's NewToken, a
//     random number in [2^32, 2^52); a record that exists (expired,
//     released, retaken) counts on from its own token. After a sweep or the
//     TTL index deleted a key's record, no zombie of the earlier lifetime
//     holds the new owner's token.
//   - Lifetime: only a settled record (completed, released) expires, when
//     expires_at <= now, in claims and in Sweep and Stats alike. An
//     in-progress record never does: past its lease it is stale, however
//     old, and claims report it to the Stale policy, Sweep leaves it, Stats
//     counts it stale, and it carries no ttl_at, so the TTL index never
//     deletes it. Renew sets lease_until and moves expires_at to at least
//     it ($max), so a renewed handler outlives its retention.
//   - Content: a released record keeps its fingerprint (takes the
//     request's only when it has none), a stale retake keeps it, and only
//     an expired record, a new lifetime, takes the request's.
//   - One clock: every time a claim, completion or sweep compares comes
//     from the request (the caller's clock); the server's clock only
//     counts down the TTL index's duration (see Expiry).
//
// # Expiry
//
// expires_at is the retention end by the caller's clock, and decides. A
// TTL index on it would let the server delete records by its own clock: a
// caller whose clock is an hour behind the server would see records with
// a short retention deleted at once, and a second consumer would acquire a
// key whose owner is still working. So the TTL index is on another field,
// ttl_at, which every write sets to the server's time plus the retention
// left by the caller's clock (ExpiresAt - Now), plus a minute: the store
// learns how far the server's clock is from its process's from the
// localTime of a hello reply (its error is half a round trip; it is
// measured again every ten minutes). A record is therefore deleted by the
// server no earlier than its retention, measured by the caller's clock,
// has passed, and within about two minutes after it (the server's TTL
// monitor runs once a minute). An in-progress record has no ttl_at: its
// claim writes that time to ttl_hold instead, Renew carries ttl_hold with
// the lease, Release renames it to ttl_at and Complete sets ttl_at anew.
//
// Where the server refuses TTL indexes (FerretDB v1 answers
// NotImplemented; Cosmos DB's RU-based API has one only on _ts), Migrate
// goes on without one with Options.TTLIndex at its default
// (TTLIfSupported; TTLRequired fails instead) and Store.TTL says so.
// Records then leave through Sweep: run an idem.Sweeper. TTLNone writes no
// ttl_at at all. Sweep takes the sweep lock (one instance at a time; the
// others get 0 at once), reads at most Limit expired ids through the
// expires_at index, and deletes them with a filter that repeats the expiry
// condition, so a key claimed again in between stays.
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
//
// # What was tested where
//
// On FerretDB v1.24.2 over SQLite (what .ci/run builds and starts), under
// -race: storetest.Run with and without the TTL index option,
// storetest.RunInspector, the entity-mode concurrency cases (concurrent
// inserts of one key, the guard with 40 deliveries of 10 messages,
// concurrent version guards), the typed error of the inbox on a server
// without transactions, a server that is down, oversized results and
// documents, operator-shaped ids at every entry point, two OS processes
// racing on one collection (TestTwoProcessRace), and
// examples/cosmos-orders end to end behind NATS JetStream.
// Not tested, for want of a server here: the transactional inbox
// (storetest.RunTx, which the tests run against any IDEM_MONGO_URL whose
// server has transactions, such as a MongoDB replica set), the TTL index
// deleting records (FerretDB v1 has no TTL indexes; ttl_at's values are
// tested), and MongoDB, Cosmos DB and DocumentDB themselves.
//
// # Performance
//
// BENCH.md in this directory has the figure and the command:
// claim+complete against a raw insertOne on the same server, in one run.
package mongoidem
