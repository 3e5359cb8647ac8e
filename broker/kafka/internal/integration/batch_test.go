package integration_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/sqlite"
)

// countingStore is the memory store (a BatchStore) counting its round trips,
// and, in benchmarks, making each one cost delay.
type countingStore struct {
	*memory.Store
	delay                     time.Duration
	claims, batches, releases atomic.Int64
	trips                     atomic.Int64 // every call, lookups aside

	mu       sync.Mutex
	released []string // ids given back with Release
}

func (s *countingStore) roundTrip() {
	s.trips.Add(1)
	if s.delay > 0 {
		time.Sleep(s.delay) // the network, in benchmarks only
	}
}

func (s *countingStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.claims.Add(1)
	s.roundTrip()
	return s.Store.Claim(ctx, req)
}

func (s *countingStore) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	s.batches.Add(1)
	s.roundTrip()
	return s.Store.ClaimBatch(ctx, reqs)
}

func (s *countingStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	s.roundTrip()
	return s.Store.Complete(ctx, req)
}

func (s *countingStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	s.releases.Add(1)
	s.mu.Lock()
	s.released = append(s.released, req.Key.ID)
	s.mu.Unlock()
	s.roundTrip()
	return s.Store.Release(ctx, req)
}

func (s *countingStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	s.roundTrip()
	return s.Store.Renew(ctx, req)
}

func (s *countingStore) releasedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.released...)
}

func newCountingGuard(t testing.TB, e *env, obs idem.Observer, delay, lease time.Duration) (*idem.Guard, *countingStore) {
	t.Helper()
	st := &countingStore{Store: memory.New(), delay: delay}
	g, err := idem.New(st, idem.Options{Scope: e.group, Observer: obs, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

// batchRun produces w, consumes it with batch claims until every offset is
// committed (checking that no commit passes an unfinished record), and
// returns the store and the outcome counts.
func batchRun(t *testing.T, e *env, w *workload, eff *effects) (*countingStore, *idem.Counter) {
	t.Helper()
	e.produce(w.recs...)
	counter := &idem.Counter{}
	g, st := newCountingGuard(t, e, counter, 0, 2*time.Second)
	e.commit.setCheck(doneBefore(st.Store, e.group, w.offsetIDs()))
	r := startConsumer(t, e, g, kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, 5*time.Millisecond), CommitInterval: 20 * time.Millisecond}, orderHandler(t, eff))
	e.waitCommitted(t)
	r.stop(nil)
	eff.check(t, w.ids)
	if n, b := len(w.recs), st.batches.Load(); b == 0 || 4*b > int64(n) {
		t.Errorf("%d batch claims for %d records: want at least one, and a batch of 4 records or more on average", b, n)
	}
	return st, counter
}

// TestBatchClaimsDuplicatesInPoll: a producer re-send right behind its
// original, in the same poll and so the same batch, is a duplicate; the
// batch claims every record in a few round trips.
func TestBatchClaimsDuplicatesInPoll(t *testing.T) {
	e := newEnv(t, "batchdups", 2)
	w := &workload{}
	for p := range int32(2) {
		for seq := range 60 {
			id := fmt.Sprintf("p%d-%d", p, seq)
			n := 1
			if seq%3 == 0 {
				n = 2 // sent twice back to back
				w.dups++
			}
			for range n {
				r := kafka.Record(e.topic, "", id, payload(p, seq))
				r.Partition = p
				w.recs = append(w.recs, r)
			}
			w.ids = append(w.ids, id)
		}
	}
	eff := newEffects(nil)
	st, counter := batchRun(t, e, w, eff)
	if got := counter.Count(idem.OutcomeDuplicate); got != int64(w.dups) {
		t.Errorf("%d duplicates, want %d", got, w.dups)
	}
	if got := st.releases.Load(); got != 0 {
		t.Errorf("%d releases with nothing to retry", got)
	}
}

// TestBatchClaimsTransientFailure: a handler failure in the middle of a
// batch holds its record; the tickets behind it are released instead of
// running ahead, then everything is processed in order, once.
func TestBatchClaimsTransientFailure(t *testing.T) {
	e := newEnv(t, "batchfail", 1)
	w := &workload{}
	for seq := range 40 {
		id := fmt.Sprintf("p0-%d", seq)
		w.recs = append(w.recs, kafka.Record(e.topic, "", id, payload(0, seq)))
		w.ids = append(w.ids, id)
	}
	eff := newEffects(func(id string) bool { return id == "p0-20" })
	st, counter := batchRun(t, e, w, eff)
	if got := counter.Count(idem.OutcomeFailed); got != 1 {
		t.Errorf("%d failures, want the one injected", got)
	}
	if got := counter.Count(idem.OutcomeInProgress); got != 0 {
		t.Errorf("%d in-progress outcomes: a claim behind the failure was not released", got)
	}
	// The failed record's own claim (released by the guard) and the unrun
	// tickets behind it; nothing before it.
	rel := st.releasedIDs()
	if len(rel) < 2 {
		t.Errorf("released %v: want the failed record's claim and the tickets behind it", rel)
	}
	for _, id := range rel {
		if seq, _ := strconv.Atoi(strings.TrimPrefix(id, "p0-")); seq < 20 {
			t.Errorf("released %s, before the failed record", id)
		}
	}
}

// TestBatchClaimsConflict: a conflicting record inside a batch is
// dead-lettered and the rest of the batch runs under its tickets.
func TestBatchClaimsConflict(t *testing.T) {
	e := newEnv(t, "batchconflict", 1)
	w := &workload{}
	for seq := range 30 {
		id := fmt.Sprintf("p0-%d", seq)
		w.recs = append(w.recs, kafka.Record(e.topic, "", id, payload(0, seq)))
		w.ids = append(w.ids, id)
		if seq == 15 {
			w.recs = append(w.recs, kafka.Record(e.topic, "", "p0-10", []byte(`{"conflict":true}`), kafka.WithHeader("trace", "x")))
			w.conflicts++
		}
	}
	eff := newEffects(nil)
	st, counter := batchRun(t, e, w, eff)
	if got := counter.Count(idem.OutcomeConflict); got != 1 {
		t.Errorf("%d conflicts, want 1", got)
	}
	dl := e.dlqRecords(1)
	checkDeadLetter(t, dl[0], e.topic, "conflict")
	if got := st.releases.Load(); got != 0 {
		t.Errorf("%d releases: the batch should run on after the dead letter", got)
	}
}

// TestPerRecordClaims: MaxClaimBatch 1 claims each record in its turn.
func TestPerRecordClaims(t *testing.T) {
	e := newEnv(t, "perrecord", 1)
	w := buildWorkload(e.topic, 1, 30)
	e.produce(w.recs...)
	g, st := newCountingGuard(t, e, nil, 0, 2*time.Second)
	eff := newEffects(nil)
	r := startConsumer(t, e, g, kafka.Options{MaxClaimBatch: 1, CommitInterval: 20 * time.Millisecond}, orderHandler(t, eff))
	e.waitCommitted(t)
	r.stop(nil)
	eff.check(t, w.ids)
	if b, c := st.batches.Load(), st.claims.Load(); b != 0 || c != int64(len(w.recs)) {
		t.Errorf("%d batch claims and %d claims for %d records, want 0 and one each", b, c, len(w.recs))
	}
}

// TestShutdownReleasesBatch: shutting down in the middle of a batch gives
// back the claims of the records that did not run, so the next owner claims
// them at once rather than after their lease. The record in flight when the
// drain times out still succeeds, so the worker stops between two records
// of the batch with tickets pending.
func TestShutdownReleasesBatch(t *testing.T) {
	e := newEnv(t, "batchstop", 1)
	var ids []string
	for seq := range 20 {
		id := fmt.Sprintf("p0-%d", seq)
		ids = append(ids, id)
		e.produce(kafka.Record(e.topic, "", id, payload(0, seq)))
	}
	g, st := newCountingGuard(t, e, nil, 0, time.Minute)
	entered := make(chan struct{})
	r := startConsumer(t, e, g, kafka.Options{ShutdownTimeout: 10 * time.Millisecond}, kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		if idOf(rec) == "p0-5" {
			close(entered)
			<-ctx.Done() // the drain timed out; the record succeeds anyway
		}
		return nil, nil
	}))
	waitClosed(t, "the handler of p0-5", entered)
	r.stop(nil)
	if st.batches.Load() == 0 {
		t.Fatal("no batch claim")
	}
	for i, id := range ids {
		rec, err := st.Get(context.Background(), idem.Key{Scope: e.group, ID: id})
		switch {
		case i <= 5 && (err != nil || rec.State != idem.StateCompleted):
			t.Errorf("%s: %v %v, want completed", id, rec.State, err)
		case i > 5 && err == nil && rec.State == idem.StateInProgress:
			t.Errorf("%s: still claimed after shutdown", id)
		}
	}
}

// batchCounting is the SQLite store (a BatchStore with transactions)
// counting its batch claims.
type batchCounting struct {
	*sqlite.Store
	batches atomic.Int64
}

func (s *batchCounting) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	s.batches.Add(1)
	return s.Store.ClaimBatch(ctx, reqs)
}

// TestHandleTxClaimsInTurn: a HandleTx handler over a store with batch
// claims marks each record in its own transaction: the consumer claims
// nothing ahead (RunTicket has no ticket to run it under).
func TestHandleTxClaimsInTurn(t *testing.T) {
	e := newEnv(t, "txinturn", 2)
	w := buildWorkload(e.topic, 2, 20)
	e.produce(w.recs...)
	st := &batchCounting{Store: openSQLite(t)}
	g, err := idem.New(st, idem.Options{Scope: e.group})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	h := kafka.HandleTx(func(ctx context.Context, tx *sql.Tx, rec *kgo.Record) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	})
	r := startConsumer(t, e, g, kafka.Options{CommitInterval: 20 * time.Millisecond}, h)
	e.waitCommitted(t)
	r.stop(nil)
	if n := st.batches.Load(); n != 0 {
		t.Errorf("%d batch claims for a HandleTx handler, want 0", n)
	}
	if n := ran.Load(); n != int64(len(w.ids)) {
		t.Errorf("handler ran %d times, want once per original (%d)", n, len(w.ids))
	}
}
