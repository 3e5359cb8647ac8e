package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/sqlite"
)

// inbox is an embedded SQLite store with an effects table, for the
// transactional cases: HandleTx writes one row per message it applies.
type inbox struct {
	store *sqlite.Store
}

func newInbox(t *testing.T) *inbox {
	t.Helper()
	store, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL, payload BLOB)`); err != nil {
		t.Fatal(err)
	}
	return &inbox{store: store}
}

// apply is the transactional handler: the effect row, in the marker's
// transaction.
func (in *inbox) apply(ctx context.Context, tx *sql.Tx, m idem.Message) ([]byte, error) {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, payload) VALUES (?, ?)`, m.ID, m.Payload)
	return nil, err
}

// count runs a COUNT query on the inbox's database.
func (in *inbox) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := in.store.DB().QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// outageBudget is how long StoreOutage keeps the store down: three times
// the broker's whole retry budget, the delivery limit's deliveries each
// a back-off (or a redelivery wait, Features.Redelivery) apart, at least
// a second apart.
func outageBudget(f Features, limit int, backoff time.Duration) time.Duration {
	return 3 * time.Duration(limit) * max(backoff, f.Redelivery, time.Second)
}

// testStoreOutage: the store refuses connections for three times the
// broker's whole retry budget, with a small delivery limit. A store outage
// is not the messages' fault: nothing is dead-lettered, nothing is lost,
// the outage is reported to the guard's observer (an idem.Outage naming
// the guard's scope) and through Hooks.OnError (an *broker.OutageError),
// and once the store is back every message is applied exactly once; in
// two-phase mode and through the transactional inbox.
func testStoreOutage(t *testing.T, b Broker) {
	for _, mode := range []string{"two-phase", "tx"} {
		t.Logf("%s: store down for %v", mode, outageBudget(b.Features(), outageLimit, outageBackoff))
		storeOutage(t, b, mode)
	}
}

const (
	outageLimit   = 2
	outageBackoff = 100 * time.Millisecond
)

func storeOutage(t *testing.T, b Broker, mode string) {
	const warm, n = 3, 12
	var (
		store   = &refusing{}
		applied func(id string) int
		c       Consumer
		reports atomic.Int64
		outages = make(chan error, 1)
		obs     = newObserved()
	)
	c.MaxDeliveries, c.RetryBackoff = outageLimit, outageBackoff
	c.Hooks = broker.Hooks[idem.Message]{
		AfterSettle: func(context.Context, idem.Message, broker.Report) { reports.Add(1) },
		OnError: func(err error) {
			var oe *broker.OutageError
			if errors.As(err, &oe) {
				select {
				case outages <- err:
				default:
				}
			}
		},
	}
	switch mode {
	case "tx":
		in := newInbox(t)
		store.Store = in.store
		c.Guard = newGuard(t, &refusingTx{refusing: store, tx: in.store}, idem.Options{Lease: 2 * time.Second, Observer: obs})
		c.HandleTx = in.apply
		applied = func(id string) int { return in.count(t, `SELECT COUNT(*) FROM effects WHERE id = ?`, id) }
	default:
		store.Store = memory.New()
		eff := newEffects()
		c.Guard = newGuard(t, store, idem.Options{Lease: 2 * time.Second, Observer: obs})
		c.Handle = func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil }
		applied = eff.count
	}
	r := start(t, b, c)
	msgs := func(prefix string, k int) []Message {
		out := make([]Message, k)
		for i := range out {
			out[i] = Message{ID: fmt.Sprintf("%s-%s-%02d", mode, prefix, i), Payload: []byte(prefix)}
		}
		return out
	}
	up, down := msgs("up", warm), msgs("down", n)
	state := func() string {
		return fmt.Sprintf("%d settled, %d refusals, %d dead letters", reports.Load(), store.refusals.Load(), len(deadLetters(t, b)))
	}
	// Warm up with the store reachable, so that no handler is in flight
	// when it goes down (a two-phase handler whose completion is lost runs
	// again: that is at-least-once, not this case).
	publish(t, b, up...)
	waitFor(t, "the warm-up applied and settled", func() bool { return reports.Load() >= warm }, state)
	store.down.Store(true)
	publish(t, b, down...)
	waitFor(t, "the outage met", func() bool { return store.refusals.Load() > 0 }, state)
	time.Sleep(outageBudget(b.Features(), outageLimit, outageBackoff)) // the outage itself
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("%s: %d dead letters during a store outage (first: %q, %v)", mode, len(dls), dls[0].ID, dls[0].Headers)
	}
	select {
	case err := <-outages:
		var oe *broker.OutageError
		if errors.As(err, &oe); oe.Scope != c.Guard.Options().Scope {
			t.Errorf("%s: the outage report names scope %q, want the consumer's %q", mode, oe.Scope, c.Guard.Options().Scope)
		}
	default:
		t.Errorf("%s: the outage was not reported through Hooks.OnError as an *broker.OutageError", mode)
	}
	select {
	case out := <-obs.outageCh:
		if out.Scope != c.Guard.Options().Scope || out.Held < 1 || out.Err == nil {
			t.Errorf("%s: the observer saw the outage %+v, want the consumer's scope %q, claims held and the store's error", mode, out, c.Guard.Options().Scope)
		}
	default:
		t.Errorf("%s: the outage was not reported to the guard's observer", mode)
	}
	store.down.Store(false)
	waitFor(t, "every message applied once the store is back", func() bool {
		for _, m := range down {
			if applied(m.ID) == 0 {
				return false
			}
		}
		return true
	}, state)
	for _, m := range append(up, down...) {
		if k := applied(m.ID); k != 1 {
			t.Errorf("%s: %s applied %d times", mode, m.ID, k)
		}
	}
	if dls := deadLetters(t, b); len(dls) != 0 {
		t.Fatalf("%s: %d dead letters after a store outage (first: %q reason %q)", mode, len(dls), dls[0].ID, dls[0].Reason())
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// testLastDeliveryCrash: a consumer dies while it holds a message's last
// allowed delivery — in the handler, before the effect, or after the
// record is durable and before the broker heard of it — and a new consumer
// starts. The message ends applied exactly once or dead-lettered, never
// gone, never applied twice.
func testLastDeliveryCrash(t *testing.T, b Broker) {
	const limit = 3
	g := newGuard(t, nil, idem.Options{Lease: 2 * time.Second})
	eff, out := newEffects(), newOutcomes()
	ids := []string{"last-killed-in-handler", "last-killed-before-settle"}
	for _, id := range ids {
		var (
			victim Running
			ready  = make(chan struct{})
			tries  atomic.Int32
			killed = make(chan struct{})
			kill   = func() {
				<-ready
				victim.Kill()
				close(killed)
			}
		)
		c := Consumer{
			Guard:         g,
			MaxDeliveries: limit,
			RetryBackoff:  20 * time.Millisecond,
			Handle: func(ctx context.Context, m idem.Message) ([]byte, error) {
				n := tries.Add(1)
				switch {
				case n < limit:
					return nil, errors.New("downstream briefly unavailable")
				case n == limit && id == ids[0]:
					kill()
					return nil, errors.New("the process died before the effect")
				}
				eff.apply(m)
				return nil, nil
			},
			Hooks: broker.Hooks[idem.Message]{
				BeforeSettle: func(_ context.Context, m idem.Message, r broker.Report) {
					if id == ids[1] && r.Result.Outcome == idem.OutcomeProcessed && tries.Load() == limit {
						kill() // the ack never leaves
					}
				},
				AfterSettle: out.hook,
			},
		}
		victim = start(t, b, c)
		close(ready)
		publish(t, b, Message{ID: id, Payload: []byte(id)})
		waitFor(t, id+": the consumer killed on the last delivery", func() bool {
			select {
			case <-killed:
				return true
			default:
				return false
			}
		}, out.String)
		survivor := c
		survivor.Handle = func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil }
		survivor.Hooks.BeforeSettle = nil
		next := start(t, b, survivor)
		waitFor(t, id+": applied or dead-lettered", func() bool {
			return eff.count(id) > 0 || deadLetteredID(t, b, id)
		}, out.String)
		if err := next.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	for _, id := range ids {
		if n := eff.count(id); n > 1 {
			t.Errorf("%s applied %d times after a crash on its last delivery", id, n)
		}
		t.Logf("%s: applied %d, dead-lettered %v", id, eff.count(id), deadLetteredID(t, b, id))
	}
}

// deadLetteredID reports whether a dead letter of message id is at the
// broker.
func deadLetteredID(t *testing.T, b Broker, id string) bool {
	for _, d := range deadLetters(t, b) {
		if d.ID == id {
			return true
		}
	}
	return false
}
