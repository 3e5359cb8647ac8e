package mongoidem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FerretDB v1 runs a conditional update, findAndModify or delete as a
// query followed by a write by _id, not as one step: two conditional writes
// racing on one document can both match and both apply (measured: 2 to 19
// of 64 concurrent retakes of one stale record won in one process; 21 to 43
// of 64 stale keys had two winners across two processes). Its inserts are
// atomic (the unique _id index of its SQLite or PostgreSQL table). On such
// a server the store writes an existing record only after taking its turn,
// an insert (turns.go), which holds across processes. Versioned.Apply, whose
// documents are the user's, serializes its writes of one document within
// the process only (keyLocks): see the package doc.

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

// keyLocks are the per-document mutexes of every Versioned in the process,
// by database, collection and _id.
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
// holds, and reports whether it did; rev is the revision the write must
// give the record (see turns.go). seen is the record as read at readAt,
// when the caller has just read it (nil: read it here).
//
// On a server with atomic conditional writes the write carries the whole
// filter, one step. On FerretDB v1, whose conditional writes are a read
// and a write by _id that can interleave with another's (in this process
// or any other), the record is read by _id, cond checked in Go, and the
// right to write over the revision read is taken first: a turn, an insert
// that only one writer of that revision wins (see turns.go). The write is
// then sent with a filter on _id alone, the only filter FerretDB v1 finds
// through its index, and no other writer can write over the same
// revision. A writer that finds the turn taken reads the record again.
func (s *Store) writeIf(ctx context.Context, id string, c cond, seen *recordDoc, readAt time.Time, write func(ctx context.Context, filter bson.D, rev string) (int64, error)) (bool, error) {
	if !serialFor(ctx, s.db.Client()) {
		n, err := write(ctx, append(bson.D{{Key: "_id", Value: id}}, c.filter...), newRev())
		return n > 0, err
	}
	var b turnBackoff
	for range maxTurnRounds {
		if seen == nil || time.Since(readAt) > turnAbandon/2 {
			readAt = time.Now()
			var d recordDoc
			err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
			if errors.Is(err, mongo.ErrNoDocuments) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			seen = &d
		}
		if !c.match(*seen) {
			return false, nil
		}
		ok, err := s.takeTurn(ctx, id, seen.Rev, readAt)
		if err != nil {
			return false, err
		}
		if ok {
			n, err := write(ctx, bson.D{{Key: "_id", Value: id}}, newRev())
			return n > 0, err
		}
		seen = nil // another writer holds the turn: read what it wrote
		if err := b.wait(ctx); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("mongoidem: other writers held the record %q's turn %d times in a row; retry", id, maxTurnRounds)
}
