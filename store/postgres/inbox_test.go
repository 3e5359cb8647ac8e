package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
	"github.com/idemgo/idem/store/storetest"
)

// newBusinessTable creates a ledger without any unique constraint: only the
// inbox stands between a redelivery and a second row.
func newBusinessTable(t *testing.T, s *postgres.Store) string {
	t.Helper()
	ledger := s.Table()[:len(s.Table())-len(`"idem_records"`)] + `"ledger"`
	if _, err := testPool(t).Exec(context.Background(), `CREATE TABLE `+ledger+` (msg text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return ledger
}

// Many workers deliver many messages with many duplicates at once, each in
// its own transaction with a business insert: the ledger ends with exactly
// one row per distinct message. Both ways of sending the marker.
func TestInboxBusinessWritesOnce(t *testing.T) {
	t.Run("marker first", func(t *testing.T) { testInboxBusinessWritesOnce(t, postgres.Options{}) })
	t.Run("MarkWithFirstStatement", func(t *testing.T) {
		testInboxBusinessWritesOnce(t, postgres.Options{MarkWithFirstStatement: true})
	})
}

func testInboxBusinessWritesOnce(t *testing.T, opts postgres.Options) {
	s := newStore(t, opts)
	postgres.NeverPauseFirst(s)
	ledger := newBusinessTable(t, s)
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	const workers, deliveries, distinct = 16, 60, 150
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		got     = map[idem.Outcome]int{}
		handled = map[string]int{}
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			<-start
			for range deliveries {
				id := fmt.Sprintf("order-%d", rng.IntN(distinct))
				msg := idem.Message{ID: id, Payload: []byte("amount=5 " + id)}
				res, err := idem.DoTx(context.Background(), g, msg, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
					_, err := tx.Exec(ctx, `INSERT INTO `+ledger+` (msg, amount) VALUES ($1, 5)`, id)
					return []byte("ok " + id), err
				})
				mu.Lock()
				if err != nil {
					t.Errorf("DoTx(%s): %v", id, err)
				}
				got[res.Outcome]++
				if res.Outcome == idem.OutcomeProcessed {
					handled[id]++
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	var rows, ids int
	if err := testPool(t).QueryRow(context.Background(), `SELECT count(*), count(DISTINCT msg) FROM `+ledger).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if rows != ids || rows != len(handled) {
		t.Fatalf("ledger has %d rows for %d messages; %d processed (outcomes %v)", rows, ids, len(handled), got)
	}
	if got[idem.OutcomeProcessed]+got[idem.OutcomeDuplicate] != workers*deliveries {
		t.Fatalf("outcomes %v, want only processed and duplicate", got)
	}
	for id, n := range handled {
		if n != 1 {
			t.Fatalf("%s processed %d times", id, n)
		}
	}
}

// Concurrent poll batches overlapping in keys (in different orders), each
// marked and written in one transaction: one row per distinct key, no
// deadlock.
func TestMarkBatchBusinessWritesOnce(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ledger := newBusinessTable(t, s)
	ctx := context.Background()
	const workers, rounds, batch, distinct = 8, 10, 50, 200
	now := storetest.T0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range rounds {
				// Distinct keys within a batch, random order across batches.
				perm := rng.Perm(distinct)[:batch]
				reqs := make([]idem.ClaimRequest, batch)
				for i, n := range perm {
					reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "poll", ID: fmt.Sprintf("m-%03d", n)},
						Fingerprint: "fp", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
				}
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					claims, err := s.MarkBatch(ctx, tx, reqs)
					if err != nil {
						return err
					}
					for i, c := range claims {
						if c.Outcome == idem.ClaimAcquired {
							if _, err := tx.Exec(ctx, `INSERT INTO `+ledger+` (msg, amount) VALUES ($1, 1)`, reqs[i].Key.ID); err != nil {
								return err
							}
						} else if c.Outcome != idem.ClaimDuplicate {
							return fmt.Errorf("batch item %s: %v", reqs[i].Key, c.Outcome)
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("MarkBatch transaction: %v", err)
	}
	var rows, ids, markers int
	if err := testPool(t).QueryRow(ctx, `SELECT count(*), count(DISTINCT msg) FROM `+ledger).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if err := testPool(t).QueryRow(ctx, `SELECT count(*) FROM `+s.Table()+` WHERE state = 2`).Scan(&markers); err != nil {
		t.Fatal(err)
	}
	if rows != ids || rows != markers || rows == 0 {
		t.Fatalf("ledger %d rows, %d distinct, %d markers", rows, ids, markers)
	}
}

// A rolled-back batch leaves no marker; MarkBatch rejects a repeated key
// without touching the transaction.
func TestMarkBatchRollbackAndDuplicates(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ctx := context.Background()
	now := storetest.T0
	req := func(id string) idem.ClaimRequest {
		return idem.ClaimRequest{Key: idem.Key{Scope: "poll", ID: id}, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	boom := errors.New("business failure")
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := s.MarkBatch(ctx, tx, []idem.ClaimRequest{req("a"), req("b")}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want the handler's error", err)
	}
	if _, err := s.Get(ctx, req("a").Key); err == nil {
		t.Fatal("marker survived the rollback")
	}
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.MarkBatch(ctx, tx, []idem.ClaimRequest{req("a"), req("a")})
		if err == nil {
			return fmt.Errorf("repeated key accepted")
		}
		if !errors.Is(err, postgres.ErrDuplicateKeyInBatch) {
			return err
		}
		// The transaction is still usable.
		claims, err := s.MarkBatch(ctx, tx, []idem.ClaimRequest{req("a")})
		if err != nil || claims[0].Outcome != idem.ClaimAcquired {
			return fmt.Errorf("MarkBatch after the rejected batch: %v %v", claims, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Callers that own their transaction (pool.Begin, not InTx) mark with
// idem.MarkTx: concurrent transactions of one message commit its business
// write once.
func TestMarkTxInCallersTransaction(t *testing.T) {
	s := newStore(t, postgres.Options{})
	ledger := newBusinessTable(t, s)
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	pool := testPool(t)
	ctx := context.Background()
	const workers, rounds = 12, 10
	for r := range rounds {
		msg := idem.Message{ID: fmt.Sprintf("own-%d", r), Payload: []byte("pay")}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
		)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback(ctx)
				res, err := idem.MarkTx[pgx.Tx](ctx, g, tx, msg)
				if err != nil {
					t.Errorf("MarkTx: %v", err)
					return
				}
				if res.Outcome == idem.OutcomeProcessed {
					if _, err := tx.Exec(ctx, `INSERT INTO `+ledger+` (msg, amount) VALUES ($1, 1)`, msg.ID); err != nil {
						t.Error(err)
						return
					}
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	var rows, ids int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg) FROM `+ledger).Scan(&rows, &ids); err != nil {
		t.Fatal(err)
	}
	if rows != rounds || ids != rounds {
		t.Fatalf("ledger %d rows, %d messages; want %d and %d", rows, ids, rounds, rounds)
	}
}
