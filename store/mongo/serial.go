package mongostore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FerretDB v1 runs a conditional update, findAndModify or delete as a
// query followed by a write by _id, not as one step: two conditional writes
// racing on one document can both match and both apply (measured: 2 to 19
// of 64 concurrent retakes of one stale record won). Its inserts are atomic
// (the unique _id index of its SQLite or PostgreSQL table). On such a server
// the store makes its conditional writes of one key one at a time within
// the process (keyLocks), which restores the atomicity the rules need for
// every Store in the process. Across processes it cannot: see the package
// doc.

// modes holds, per client, whether the store must serialize its own
// conditional writes: modeUnknown, modeAtomic (the server's are atomic) or
// modeSerial.
var modes sync.Map // *mongo.Client -> *atomic.Int32

const (
	modeUnknown int32 = iota
	modeAtomic
	modeSerial
)

// serialFor reports whether conditional writes through c must go through
// keyLocks, asking the server (buildInfo) on first use. When it cannot be
// asked, the answer is yes for this call (safe either way) and asked again
// next time.
func serialFor(ctx context.Context, c *mongo.Client) bool {
	v, _ := modes.LoadOrStore(c, new(atomic.Int32))
	mode := v.(*atomic.Int32)
	switch mode.Load() {
	case modeAtomic:
		return false
	case modeSerial:
		return true
	}
	var bi struct {
		FerretDB string `bson:"ferretdbVersion"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		return true
	}
	m := modeAtomic
	if nonAtomicUpdates(bi.FerretDB) {
		m = modeSerial
	}
	mode.Store(m)
	return m == modeSerial
}

// nonAtomicUpdates reports whether a FerretDB version (buildInfo's
// ferretdbVersion, "" for other servers) evaluates conditional writes
// outside the database: every 1.x (2.x runs on DocumentDB in PostgreSQL).
func nonAtomicUpdates(ferretdb string) bool {
	v := strings.TrimPrefix(ferretdb, "v")
	if v == "" {
		return false
	}
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return err != nil || n < 2
}

// keyLocks are the per-key mutexes of every Store in the process, by
// database, collection and record id.
var keyLocks = lockTable{m: map[string]*keyLock{}}

type lockTable struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// lock locks name and returns its unlock.
func (t *lockTable) lock(name string) (unlock func()) {
	t.mu.Lock()
	l := t.m[name]
	if l == nil {
		l = &keyLock{}
		t.m[name] = l
	}
	l.refs++
	t.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		t.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(t.m, name)
		}
		t.mu.Unlock()
	}
}

// lockDoc serializes the conditional writes of the document with _id id
// of coll when the server needs it (entity mode), and returns the unlock.
func lockDoc(ctx context.Context, coll *mongo.Collection, id any) (unlock func()) {
	if !serialFor(ctx, coll.Database().Client()) {
		return func() {}
	}
	raw, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}})
	return keyLocks.lock(coll.Database().Name() + "\x00" + coll.Name() + "\x00" + string(raw))
}

// cond is the condition of a conditional write: the filter the server
// evaluates (besides _id), and the same condition in Go, for servers whose
// conditional writes are not atomic.
type cond struct {
	filter bson.D
	match  func(d recordDoc) bool
}

// writeIf runs write, a write of the record with _id id, only while cond
// holds, and reports whether it did. On a server with atomic conditional
// writes the write carries the whole filter. On FerretDB v1, under the
// key's lock, the record is read by _id, cond checked in Go, and the write
// sent with a filter on _id alone: the only filter FerretDB v1 finds
// through its index (any other makes it scan the collection in its own
// process), and under the lock as atomic within the process as its own
// read-then-write would be.
func (s *Store) writeIf(ctx context.Context, id string, c cond, write func(ctx context.Context, filter bson.D) (int64, error)) (bool, error) {
	if !serialFor(ctx, s.db.Client()) {
		n, err := write(ctx, append(bson.D{{Key: "_id", Value: id}}, c.filter...))
		return n > 0, err
	}
	defer keyLocks.lock(s.db.Name() + "\x00" + s.opts.Collection + "\x00" + id)()
	var d recordDoc
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !c.match(d) {
		return false, nil
	}
	n, err := write(ctx, bson.D{{Key: "_id", Value: id}})
	return n > 0, err
}
