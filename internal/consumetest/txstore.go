package consumetest

import (
	"context"
	"maps"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// TxStore is a small transactional inbox for tests: transactions run one at
// a time and buffer their writes (markers and business rows) until commit,
// so a failed handler leaves nothing behind. The SQL stores provide the real
// thing. Two-phase records go to the embedded memory store.
type TxStore struct {
	*memory.Store
	mu      sync.Mutex
	markers map[[2]string]idem.Record
	orders  map[string]int
}

// Tx is a transaction of TxStore.
type Tx struct {
	markers map[[2]string]idem.Record
	orders  map[string]int
}

// Charge writes a business row for order id inside the transaction.
func (t *Tx) Charge(id string) { t.orders[id]++ }

// NewTxStore returns an empty TxStore.
func NewTxStore() *TxStore {
	return &TxStore{Store: memory.New(), markers: map[[2]string]idem.Record{}, orders: map[string]int{}}
}

// InTx runs fn in a transaction, committing its writes if fn returns nil.
func (s *TxStore) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := &Tx{markers: map[[2]string]idem.Record{}, orders: map[string]int{}}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	maps.Copy(s.markers, tx.markers)
	for id, n := range tx.orders {
		s.orders[id] += n
	}
	return nil
}

// Mark decides with the rules of a real inbox (idem.ApplyMark), reading the
// transaction's own writes first.
func (s *TxStore) Mark(ctx context.Context, tx *Tx, req idem.ClaimRequest) (idem.Claim, error) {
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

// SaveResult stores the handler's result on the transaction's marker.
func (s *TxStore) SaveResult(ctx context.Context, tx *Tx, key idem.Key, result []byte) error {
	k := [2]string{key.Scope, key.StoredID()}
	r := tx.markers[k]
	r.Result = append([]byte(nil), result...)
	tx.markers[k] = r
	return nil
}

// CommittedOrders returns how many committed rows each order id has.
func (s *TxStore) CommittedOrders() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.orders)
}

var _ idem.TxStore[*Tx] = (*TxStore)(nil)
