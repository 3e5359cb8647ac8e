package load_test

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/load"
)

// table is an in-memory keyed table with transactions: a batch's writes
// land on commit only. It counts every row written, to prove none is
// written twice.
type table struct {
	mu      sync.Mutex
	rows    map[string]string // key -> fingerprint
	writes  int
	commits int
	// retryFirst makes the writer refuse a disposable first try of a batch
	// with a stored key, as loadpgx's COPY does.
	retryFirst bool
	tries      []bool // Disposable(ctx) of every WriteBatch
	failAt     int    // if > 0, the batch holding row N == failAt fails
}

func newTable() *table { return &table{rows: map[string]string{}} }

type tx struct{ pending map[string]string }

func (t *table) InTx(ctx context.Context, fn func(ctx context.Context, tx *tx) error) error {
	x := &tx{pending: map[string]string{}}
	if err := fn(ctx, x); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range x.pending {
		if _, dup := t.rows[k]; dup {
			return errors.New("fake: committed a key twice")
		}
		t.rows[k] = v
		t.writes++
	}
	t.commits++
	return nil
}

var errFail = errors.New("fake: batch failed")

func (t *table) WriteBatch(ctx context.Context, x *tx, b *load.Batch) ([]idem.Claim, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tries = append(t.tries, load.Disposable(ctx))
	claims := make([]idem.Claim, len(b.Rows))
	for i, r := range b.Rows {
		if t.failAt > 0 && r.N == t.failAt {
			return nil, errFail
		}
		if i > 0 && b.Rows[i-1].Key >= r.Key {
			return nil, errors.New("fake: batch not in key order, or keys repeated")
		}
		fp, stored := t.rows[r.Key]
		if !stored {
			fp, stored = x.pending[r.Key]
		}
		if stored {
			if t.retryFirst && load.Disposable(ctx) {
				return nil, load.ErrRetryBatch
			}
			claims[i] = idem.Claim{Outcome: idem.ClaimDuplicate, Record: idem.Record{Fingerprint: fp}}
			continue
		}
		x.pending[r.Key] = r.Fingerprint
		claims[i] = idem.Claim{Outcome: idem.ClaimAcquired, Record: idem.Record{Fingerprint: r.Fingerprint}}
	}
	return claims, nil
}

// rowsOf is a Source of rows keyed and fingerprinted as given: "k=v" is
// key k with content v.
func rowsOf(kv ...string) load.Source {
	i := 0
	return load.SourceFunc(func(ctx context.Context) (load.Row, error) {
		if i == len(kv) {
			return load.Row{}, io.EOF
		}
		s := kv[i]
		i++
		k, v := s, ""
		for j := range s {
			if s[j] == '=' {
				k, v = s[:j], s[j+1:]
				break
			}
		}
		return load.Row{N: i, Line: i + 1, Key: k, Fingerprint: load.Hash(v), Values: []any{k, v}}, nil
	})
}
