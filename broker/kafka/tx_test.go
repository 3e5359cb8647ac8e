package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// ledgerTx is the transaction of ledgerStore: staged effects and markers,
// applied together at commit or dropped together at rollback.
type ledgerTx struct {
	effects []string
	marks   []idem.ClaimRequest
	results map[idem.Key][]byte
}

// ledgerStore is a transactional inbox for tests: a memory store for the
// markers and a business ledger, written together under one lock (one
// transaction at a time, like a serialisable database).
type ledgerStore struct {
	*memory.Store
	mu     sync.Mutex
	ledger map[string]int
}

func newLedgerStore() *ledgerStore {
	return &ledgerStore{Store: memory.New(), ledger: make(map[string]int)}
}

func (s *ledgerStore) InTx(ctx context.Context, fn func(ctx context.Context, tx *ledgerTx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := &ledgerTx{results: make(map[idem.Key][]byte)}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	for _, req := range tx.marks {
		c, err := s.Store.Claim(ctx, req)
		if err != nil {
			return err
		}
		if err := s.Store.Complete(ctx, idem.CompleteRequest{Key: req.Key, Token: c.Record.Token, Result: tx.results[req.Key], Now: req.Now, ExpiresAt: req.ExpiresAt}); err != nil {
			return err
		}
	}
	for _, e := range tx.effects {
		s.ledger[e]++
	}
	return nil
}

// Mark decides with the same rules as a real inbox (idem.ApplyMark) and
// stages the marker; InTx's lock makes the decision and the write atomic.
func (s *ledgerStore) Mark(ctx context.Context, tx *ledgerTx, req idem.ClaimRequest) (idem.Claim, error) {
	var cur *idem.Record
	r, err := s.Store.Get(ctx, req.Key)
	switch {
	case err == nil:
		cur = &r
	case !errors.Is(err, idem.ErrNotFound):
		return idem.Claim{}, err
	}
	c, write := idem.ApplyMark(cur, req)
	if write {
		tx.marks = append(tx.marks, req)
	}
	return c, nil
}

func (s *ledgerStore) SaveResult(_ context.Context, tx *ledgerTx, key idem.Key, result []byte) error {
	tx.results[key] = result
	return nil
}

// TestRunTx: the transactional variant writes each business effect exactly
// once; a failed handler rolls back its effect with the marker.
func TestRunTx(t *testing.T) {
	e := newEnv(t, "ledger", 3)
	w := buildWorkload(e.topic, 3, 200)
	e.produce(w.recs...)
	st := newLedgerStore()
	g, err := idem.New(st, idem.Options{Scope: "x"})
	if err != nil {
		t.Fatal(err)
	}
	fail := everyNth(7)
	var failMu sync.Mutex
	failed := make(map[string]bool)
	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, CommitInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafka.RunTx(ctx, c, func(ctx context.Context, tx *ledgerTx, rec *kgo.Record) ([]byte, error) {
			id := idOf(rec)
			tx.effects = append(tx.effects, id) // staged: rolled back on error
			failMu.Lock()
			defer failMu.Unlock()
			if fail(id) && !failed[id] {
				failed[id] = true
				return nil, errors.New("deadlock detected, retry")
			}
			return []byte("ok"), nil
		})
	}()
	e.waitCommitted(t)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunTx: %v", err)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.ledger) != len(w.ids) {
		t.Errorf("ledger has %d keys, want %d", len(st.ledger), len(w.ids))
	}
	for _, id := range w.ids {
		if st.ledger[id] != 1 {
			t.Errorf("ledger[%s] = %d, want 1", id, st.ledger[id])
		}
	}
	if len(failed) == 0 {
		t.Error("no failure injected")
	}
	for _, r := range e.dlqRecords(w.conflicts) {
		checkDeadLetter(t, r, e.topic, "conflict")
	}
}

// TestRunTxNeedsTxStore: RunTx refuses a store without an inbox for Tx.
func TestRunTxNeedsTxStore(t *testing.T) {
	e := newEnv(t, "notx", 1)
	g, _ := newGuard(t, nil)
	cl := e.consumerClient()
	defer cl.Close()
	c, err := kafka.NewConsumer(cl, g, kafka.Options{DeadLetterTopic: e.dlq})
	if err != nil {
		t.Fatal(err)
	}
	err = kafka.RunTx(context.Background(), c, func(context.Context, *ledgerTx, *kgo.Record) ([]byte, error) { return nil, nil })
	if !errors.Is(err, idem.ErrNoTx) {
		t.Fatalf("RunTx = %v, want ErrNoTx", err)
	}
}
