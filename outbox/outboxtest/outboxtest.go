// Package outboxtest is the conformance suite every outbox store runs: the
// executable definition of outbox.Store, outbox.Inspector and the Enqueue
// rules. Third-party stores run it too:
//
//	func TestConformance(t *testing.T) {
//		outboxtest.Run(t, func(t *testing.T, clock func() time.Time) outboxtest.Subject {
//			s := newIsolatedStore(t, clock) // its own table; Options.Clock = clock
//			return outboxtest.Subject{Store: s, InTx: ...}
//		})
//	}
//
// Each subtest asks for a fresh, empty store on the suite's clock, so time
// moves without sleeping; every time the suite uses is a whole millisecond.
package outboxtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
)

// Enqueue writes messages in the transaction InTx runs.
type Enqueue func(ctx context.Context, msgs ...outbox.Message) error

// Subject is one store under test.
type Subject struct {
	// Store is the store; it must implement outbox.Inspector too.
	Store outbox.Store
	// InTx runs fn in a new transaction of the store's database and
	// commits when fn returns nil (rolling back otherwise); enqueue is the
	// store's Enqueue on that transaction.
	InTx func(ctx context.Context, fn func(ctx context.Context, enqueue Enqueue) error) error
	// SerialWriters says the database runs one write transaction at a time
	// (SQLite): commit order is Seq order by construction, and the cases
	// with two open transactions are skipped.
	SerialWriters bool
}

// NewSubject returns a fresh, empty store whose Enqueue reads clock for
// CreatedAt, and registers its cleanup with t.Cleanup.
type NewSubject func(t *testing.T, clock func() time.Time) Subject

// T0 is the suite's base time.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Clock is the suite's settable clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	t     *testing.T
	s     Subject
	in    outbox.Inspector
	clock *Clock
	ctx   context.Context
}

// Run runs the whole suite against stores made by newSubject.
func Run(t *testing.T, newSubject NewSubject) {
	tests := []struct {
		name string
		fn   func(e *env)
	}{
		{"EnqueueFetchRoundTrip", testRoundTrip},
		{"FetchLimitAndOrder", testFetchOrder},
		{"RollbackWritesNothing", testRollback},
		{"InvalidMessagesWriteNothing", testInvalid},
		{"SameIDSameContentOnce", testSameID},
		{"SameIDOtherContentConflict", testConflict},
		{"DerivedIDsStableAcrossRuns", testDerived},
		{"MarkPublished", testMarkPublished},
		{"FailureHoldsBackItsKeyOnly", testFailureHoldsKey},
		{"ParkedHoldsKeyUntilRetried", testParked},
		{"Lease", testLease},
		{"Cleanup", testCleanup},
		{"StatsAndList", testStatsList},
		{"LargePayload", testLargePayload},
		{"NotBeforeKept", testNotBefore},
		{"KeyCommitOrder", testKeyCommitOrder},
		{"OtherKeysDoNotWait", testOtherKeysFlow},
		{"ConcurrentEnqueues", testConcurrent},
		{"CancelledContext", testCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := &Clock{now: T0}
			s := newSubject(t, c.Now)
			in, ok := s.Store.(outbox.Inspector)
			if !ok {
				t.Fatalf("%T does not implement outbox.Inspector", s.Store)
			}
			tc.fn(&env{t: t, s: s, in: in, clock: c, ctx: ctx})
		})
	}
}

// enqueue writes msgs in one committed transaction.
func (e *env) enqueue(msgs ...outbox.Message) {
	e.t.Helper()
	if err := e.tryEnqueue(e.ctx, msgs...); err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
}

func (e *env) tryEnqueue(ctx context.Context, msgs ...outbox.Message) error {
	return e.s.InTx(ctx, func(ctx context.Context, enq Enqueue) error { return enq(ctx, msgs...) })
}

// fetch returns every ready record at the clock's time.
func (e *env) fetch() []outbox.Record {
	e.t.Helper()
	return e.fetchAt(e.clock.Now(), 10000)
}

func (e *env) fetchAt(now time.Time, limit int) []outbox.Record {
	e.t.Helper()
	recs, err := e.s.Store.Fetch(e.ctx, outbox.FetchRequest{Now: now, Limit: limit})
	if err != nil {
		e.t.Fatalf("fetch: %v", err)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Seq <= recs[i-1].Seq {
			e.t.Fatalf("fetch: Seq %d after %d: not ascending", recs[i].Seq, recs[i-1].Seq)
		}
	}
	return recs
}

func (e *env) stats() outbox.Stats {
	e.t.Helper()
	st, err := e.in.Stats(e.ctx, e.clock.Now())
	if err != nil {
		e.t.Fatalf("stats: %v", err)
	}
	return st
}

func (e *env) list(f outbox.ListFilter) []outbox.Record {
	e.t.Helper()
	recs, err := e.in.List(e.ctx, f)
	if err != nil {
		e.t.Fatalf("list: %v", err)
	}
	return recs
}

func ids(recs []outbox.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func seqs(recs []outbox.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func msg(id, dest, key string) outbox.Message {
	return outbox.Message{ID: id, Destination: dest, OrderingKey: key, Payload: []byte("payload of " + id)}
}
