package amqpidem_test

import (
	"context"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// txStore is a small transactional inbox for tests: transactions run one at
// a time and buffer their writes (markers and business rows) until commit,
// so a failed handler leaves nothing behind. The SQL stores provide the real
// thing.
type txStore struct {
	*memory.Store
	mu      sync.Mutex
	markers map[[2]string]idem.Record
	orders  map[string]int
}

type memTx struct {
	markers map[[2]string]idem.Record
	orders  map[string]int
}

// Charge writes a business row inside the transaction.
func (t *memTx) Charge(id string) { t.orders[id]++ }

func newTxStore() *txStore {
	return &txStore{Store: memory.New(), markers: map[[2]string]idem.Record{}, orders: map[string]int{}}
}

func (s *txStore) InTx(ctx context.Context, fn func(ctx context.Context, tx *memTx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := &memTx{markers: map[[2]string]idem.Record{}, orders: map[string]int{}}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	for k, r := range tx.markers {
		s.markers[k] = r
	}
	for id, n := range tx.orders {
		s.orders[id] += n
	}
	return nil
}

func (s *txStore) Mark(ctx context.Context, tx *memTx, req idem.ClaimRequest) (idem.Claim, error) {
	k := [2]string{req.Key.Scope, req.Key.StoredID()}
	var cur *idem.Record
	if r, ok := tx.markers[k]; ok {
		cur = &r
	} else if r, ok := s.markers[k]; ok {
		cur = &r
	}
	c, write := idem.ApplyMark(cur, req)
	if write {
		tx.markers[k] = c.Record
	}
	return c, nil
}

func (s *txStore) SaveResult(ctx context.Context, tx *memTx, key idem.Key, result []byte) error {
	k := [2]string{key.Scope, key.StoredID()}
	r := tx.markers[k]
	r.Result = append([]byte(nil), result...)
	tx.markers[k] = r
	return nil
}

func (s *txStore) committedOrders() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.orders))
	for k, v := range s.orders {
		out[k] = v
	}
	return out
}

var _ idem.TxStore[*memTx] = (*txStore)(nil)
