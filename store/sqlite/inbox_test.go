package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/sqlite"
)

const chargesDDL = `CREATE TABLE IF NOT EXISTS charges (order_id TEXT NOT NULL, amount INTEGER NOT NULL)`

// openInbox opens (or reopens, after a simulated crash) the database at path
// with the business table next to the markers.
func openInbox(t *testing.T, path string) (*sqlite.Store, *idem.Guard) {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, chargesDDL); err != nil {
		t.Fatal(err)
	}
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	return s, g
}

func countCharges(t *testing.T, db *sql.DB, orderID string) int {
	t.Helper()
	var n int
	q, args := `SELECT count(*) FROM charges`, []any{}
	if orderID != "" {
		q, args = q+` WHERE order_id = ?`, append(args, orderID)
	}
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// broker is an at-least-once queue: a delivery stays queued until acked.
type broker struct{ queue []idem.Message }

func (b *broker) next() (idem.Message, bool) {
	if len(b.queue) == 0 {
		return idem.Message{}, false
	}
	return b.queue[0], true
}

func (b *broker) ack() { b.queue = b.queue[1:] }

type crashPoint int

const (
	noCrash           crashPoint = iota
	crashBeforeCommit            // the process dies inside the transaction
	crashBeforeAck               // the process dies after the commit, before the ack
)

var errCrash = errors.New("simulated crash")

// consume handles one delivery the way a broker integration does, dying at
// crash. It reports whether the process survived (the ack was sent).
func consume(t *testing.T, g *idem.Guard, b *broker, runs *int, crash crashPoint) (survived bool) {
	t.Helper()
	msg, ok := b.next()
	if !ok {
		t.Fatal("nothing to deliver")
	}
	defer func() {
		if p := recover(); p != nil {
			if p != errCrash {
				panic(p)
			}
			survived = false
		}
	}()
	res, err := idem.DoTx(context.Background(), g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		*runs++
		amount, _ := strconv.Atoi(string(msg.Payload))
		if _, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, ?)`, msg.ID, amount); err != nil {
			return nil, err
		}
		if crash == crashBeforeCommit {
			panic(errCrash) // the row is written in the open transaction, never committed
		}
		return []byte("charged " + msg.ID), nil
	})
	if crash == crashBeforeAck {
		return false
	}
	if a := idem.Decide(res, err); a != idem.ActionAck {
		t.Fatalf("delivery of %s: %v %v → %v, want ack", msg.ID, res.Outcome, err, a)
	}
	b.ack()
	return true
}

// TestInboxCrashPoints drives the transactional inbox through each crash
// point of a consumer, restarting the process (reopening the file) after a
// crash, and counts the business rows exactly.
func TestInboxCrashPoints(t *testing.T) {
	cases := []struct {
		name     string
		crash    crashPoint
		runs     int // handler executions in total
		delivers int // deliveries in total
	}{
		// Rolled back: the redelivery processes the order.
		{"BeforeCommit", crashBeforeCommit, 2, 2},
		// Committed but not acked: the redelivery is a duplicate, skipped.
		{"AfterCommitBeforeAck", crashBeforeAck, 1, 2},
		// Acked: nothing is redelivered.
		{"AfterAck", noCrash, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shop.db")
			s, g := openInbox(t, path)
			b := &broker{queue: []idem.Message{{ID: "order-7", Payload: []byte("4200")}}}
			runs, delivers := 0, 1
			if !consume(t, g, b, &runs, c.crash) {
				// The process died: nothing of it survives but the file.
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s, g = openInbox(t, path)
				after := countCharges(t, s.DB(), "")
				want := 1
				if c.crash == crashBeforeCommit {
					want = 0
				}
				if after != want {
					t.Fatalf("after the crash: %d charges, want %d", after, want)
				}
			}
			for {
				if _, ok := b.next(); !ok {
					break
				}
				delivers++
				if !consume(t, g, b, &runs, noCrash) {
					t.Fatal("redelivery crashed")
				}
			}
			defer s.Close()
			if n := countCharges(t, s.DB(), "order-7"); n != 1 {
				t.Fatalf("order-7 charged %d times, want 1", n)
			}
			if n := countCharges(t, s.DB(), ""); n != 1 {
				t.Fatalf("%d charges in total, want 1", n)
			}
			if runs != c.runs || delivers != c.delivers {
				t.Fatalf("handler ran %d times over %d deliveries, want %d over %d", runs, delivers, c.runs, c.delivers)
			}
			rec, err := s.Get(context.Background(), idem.Key{Scope: "billing", ID: "order-7"})
			if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "charged order-7" {
				t.Fatalf("marker = %+v, %v", rec, err)
			}
			// A producer re-sending the order later is a duplicate too.
			res, err := idem.DoTx(context.Background(), g, idem.Message{ID: "order-7", Payload: []byte("4200")},
				func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
					t.Fatal("handler ran for a re-sent order")
					return nil, nil
				})
			if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "charged order-7" {
				t.Fatalf("re-send = %v %q %v", res.Outcome, res.Value, err)
			}
		})
	}
}

// TestDoTxConcurrentManyKeys delivers every order to many goroutines at
// once, in random orders: each order is charged exactly once and every other
// delivery is a duplicate, with no errors (no SQLITE_BUSY).
func TestDoTxConcurrentManyKeys(t *testing.T) {
	const workers, orders = 16, 40
	path := filepath.Join(t.TempDir(), "shop.db")
	s, g := openInbox(t, path)
	defer s.Close()
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		processed atomic.Int64
		dups      atomic.Int64
		runs      atomic.Int64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for _, i := range rng.Perm(orders) {
				id := fmt.Sprintf("order-%03d", i)
				res, err := idem.DoTx(context.Background(), g, idem.Message{ID: id, Payload: []byte(strconv.Itoa(i))},
					func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
						runs.Add(1)
						_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, ?)`, id, i)
						return nil, err
					})
				switch {
				case err != nil:
					t.Errorf("DoTx(%s): %v", id, err)
				case res.Outcome == idem.OutcomeProcessed:
					processed.Add(1)
				case res.Outcome == idem.OutcomeDuplicate:
					dups.Add(1)
				default:
					t.Errorf("DoTx(%s) = %v", id, res.Outcome)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := countCharges(t, s.DB(), ""); n != orders {
		t.Fatalf("%d charges for %d unique orders", n, orders)
	}
	var distinct int
	if err := s.DB().QueryRow(`SELECT count(DISTINCT order_id) FROM charges`).Scan(&distinct); err != nil || distinct != orders {
		t.Fatalf("%d distinct orders charged, %v", distinct, err)
	}
	if processed.Load() != orders || dups.Load() != workers*orders-orders || runs.Load() != orders {
		t.Fatalf("processed %d, duplicates %d, handler runs %d", processed.Load(), dups.Load(), runs.Load())
	}
}

// TestMarkTxCallerTransaction uses the marker inside a transaction the
// caller begins on the store's database (Open's DSN begins IMMEDIATE).
func TestMarkTxCallerTransaction(t *testing.T) {
	s, g := openInbox(t, filepath.Join(t.TempDir(), "shop.db"))
	defer s.Close()
	ctx := context.Background()
	charge := func(msg idem.Message) idem.Outcome {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		res, err := idem.MarkTx(ctx, g, tx, msg)
		if err != nil {
			t.Fatalf("MarkTx: %v", err)
		}
		if res.Outcome == idem.OutcomeProcessed {
			if _, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, 1)`, msg.ID); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return res.Outcome
	}
	msg := idem.Message{ID: "o-1", Payload: []byte("1")}
	if o := charge(msg); o != idem.OutcomeProcessed {
		t.Fatalf("first = %v", o)
	}
	if o := charge(msg); o != idem.OutcomeDuplicate {
		t.Fatalf("second = %v", o)
	}
	if n := countCharges(t, s.DB(), ""); n != 1 {
		t.Fatalf("%d charges", n)
	}
	// A conflicting re-use of the id is reported, not dropped.
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := idem.MarkTx(ctx, g, tx, idem.Message{ID: "o-1", Payload: []byte("999")}); !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("conflicting MarkTx = %v", err)
	}
}

// TestDoTxTwoStoresOneFile runs two stores on one file, as two processes on
// one host would: they share no in-process lock, so SQLite's own writer lock
// (taken at the start of each transaction) and busy timeout arbitrate. Every
// order is charged once and mailed once (two-phase), with no errors besides
// ErrInProgress for a mail claimed by the other side at that moment.
func TestDoTxTwoStoresOneFile(t *testing.T) {
	const perStore, orders = 4, 30
	for _, mode := range []string{"open", "new-deferred"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shop.db")
			var guards, mailers []*idem.Guard
			var first *sqlite.Store
			for range 2 {
				var s *sqlite.Store
				if mode == "open" {
					s, _ = openInbox(t, path)
				} else {
					db, err := sql.Open(sqlite.DriverName, path+"?_journal_mode=WAL&_busy_timeout=10000")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { db.Close() })
					if s, err = sqlite.New(db, sqlite.Options{}); err != nil {
						t.Fatal(err)
					}
					if err := s.Migrate(context.Background()); err != nil {
						t.Fatal(err)
					}
					if _, err := db.Exec(chargesDDL); err != nil {
						t.Fatal(err)
					}
				}
				defer s.Close()
				if first == nil {
					first = s
				}
				g, err := idem.New(s, idem.Options{Scope: "billing"})
				if err != nil {
					t.Fatal(err)
				}
				m, err := idem.New(s, idem.Options{Scope: "mailer"})
				if err != nil {
					t.Fatal(err)
				}
				guards, mailers = append(guards, g), append(mailers, m)
			}
			var (
				wg        sync.WaitGroup
				start     = make(chan struct{})
				processed atomic.Int64
				mailed    atomic.Int64
			)
			for w := range 2 * perStore {
				g, m := guards[w%2], mailers[w%2]
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rng := rand.New(rand.NewPCG(uint64(w), 11))
					for _, i := range rng.Perm(orders) {
						id := fmt.Sprintf("order-%03d", i)
						res, err := idem.DoTx(context.Background(), g, idem.Message{ID: id, Payload: []byte("1")},
							func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
								_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, 1)`, id)
								return nil, err
							})
						if err != nil {
							t.Errorf("DoTx(%s): %v", id, err)
						} else if res.Outcome == idem.OutcomeProcessed {
							processed.Add(1)
						}
						_, err = m.Do(context.Background(), idem.Message{ID: id, Payload: []byte("1")}, func(context.Context) ([]byte, error) {
							mailed.Add(1)
							return nil, nil
						})
						if err != nil && !errors.Is(err, idem.ErrInProgress) {
							t.Errorf("Do(%s): %v", id, err)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := countCharges(t, first.DB(), ""); n != orders || processed.Load() != orders || mailed.Load() != orders {
				t.Fatalf("%d charges, %d processed, %d mailed, for %d orders", n, processed.Load(), mailed.Load(), orders)
			}
		})
	}
}
