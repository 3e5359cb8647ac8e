// Package inboxcheck holds the checks that the entity stores share
// (entity.Store, entitypgx.Store and store/mongo's EntityInbox and
// Entities): a record-less TxStore is not an idem.Store; a guard made over
// it with idem.NewInbox refuses two-phase work without running the handler;
// concurrent inserts of one entity key create it once and report the rest
// as duplicates; concurrent deliveries through idem.DoTx apply each message
// once; concurrent versions of one entity end at the newest.
package inboxcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
)

// NotAStore fails t unless s lacks every method of idem.Store while it is an
// idem.TxStore[Tx], so idem.New cannot take it and idem.NewInbox can.
func NotAStore[Tx any](t testing.TB, s any) {
	t.Helper()
	if _, ok := s.(idem.Store); ok {
		t.Fatalf("%T is an idem.Store: idem.New would take it and deduplicate nothing", s)
	}
	if _, ok := s.(idem.TxStore[Tx]); !ok {
		t.Fatalf("%T is not an idem.TxStore", s)
	}
	st := reflect.TypeOf(s)
	store := reflect.TypeFor[idem.Store]()
	for i := range store.NumMethod() {
		if m := store.Method(i).Name; hasMethod(st, m) {
			t.Errorf("%T has idem.Store's method %s", s, m)
		}
	}
}

func hasMethod(t reflect.Type, name string) bool {
	_, ok := t.MethodByName(name)
	return ok
}

// Refuses fails t unless every two-phase call of g (Do, DoKey, ClaimBatch
// and its tickets) returns an error wrapping idem.ErrNoRecords that names
// DoTx, without running the handler.
func Refuses(t testing.TB, g *idem.Guard, msg idem.Message) {
	t.Helper()
	ctx := context.Background()
	var ran atomic.Int32
	h := func(context.Context) ([]byte, error) {
		ran.Add(1) // a side effect outside the database
		return nil, nil
	}
	check := func(call string, res idem.Result, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrNoRecords) || !strings.Contains(err.Error(), "DoTx") {
			t.Errorf("%s = %v, %v; want an error wrapping idem.ErrNoRecords that says to use DoTx", call, res.Outcome, err)
		}
		if res.Outcome == idem.OutcomeProcessed || idem.Decide(res, err) == idem.ActionAck {
			t.Errorf("%s reported %v (%v): the message would be acked", call, res.Outcome, idem.Decide(res, err))
		}
	}
	for range 3 { // duplicates too: none runs
		res, err := g.Do(ctx, msg, h)
		check("Do", res, err)
	}
	key, err := g.Key(msg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.DoKey(ctx, key, "fp", h)
	check("DoKey", res, err)
	tickets, err := g.ClaimBatch(ctx, []idem.Message{msg, msg})
	if err != nil {
		if !errors.Is(err, idem.ErrNoRecords) {
			t.Errorf("ClaimBatch = %v; want an error wrapping idem.ErrNoRecords", err)
		}
	} else {
		for _, tk := range tickets {
			res, err := tk.Do(ctx, h)
			check("Ticket.Do", res, err)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the two-phase handler ran %d times on a guard without records", n)
	}
}

// InsertRace fails t unless, for each of ids keys ("o-0", "o-1", ...),
// goroutines concurrent insert calls create the entity exactly once and
// every other call returns an *idem.DuplicateError.
func InsertRace(t testing.TB, ids, goroutines int, insert func(id string) error) {
	t.Helper()
	for k := range ids {
		id := fmt.Sprintf("o-%d", k)
		var (
			wg             sync.WaitGroup
			start          = make(chan struct{})
			mu             sync.Mutex
			inserted, dups int
			errs           []error
		)
		for range goroutines {
			wg.Go(func() {
				<-start
				err := insert(id)
				mu.Lock()
				defer mu.Unlock()
				var de *idem.DuplicateError
				switch {
				case err == nil:
					inserted++
				case errors.As(err, &de):
					dups++
				default:
					errs = append(errs, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 || inserted != 1 || dups != goroutines-1 {
			t.Fatalf("%s: inserted %d, duplicates %d, errors %v; want 1, %d, none", id, inserted, dups, errs, goroutines-1)
		}
	}
}

// Deliveries sends deliveries concurrent messages through idem.DoTx on g,
// over distinct ids ("p-0", "p-1", ..., each the message's ID and payload),
// with apply as the handler's writes in the transaction. It fails t unless
// every delivery is acked, apply went through once per id, and counter (g's
// Observer) saw distinct processed and deliveries-distinct duplicates.
func Deliveries[Tx any](t testing.TB, g *idem.Guard, counter *idem.Counter, deliveries, distinct int, apply func(ctx context.Context, tx Tx, id string) error) {
	t.Helper()
	deliver(t, g, counter, deliveries, distinct, apply, nil)
}

// DeliveriesCommitted is Deliveries for stores whose handler runs before
// the store knows whether its writes will commit (a batch sent when the
// handler returns, refused whole when another delivery's came first, and
// the handler run again): a handler run that returns nil proves nothing
// there. Instead, once every delivery is done, committed(id) reads how
// many times id's effect is stored, which must be once.
func DeliveriesCommitted[Tx any](t testing.TB, g *idem.Guard, counter *idem.Counter, deliveries, distinct int, apply func(ctx context.Context, tx Tx, id string) error, committed func(id string) int) {
	t.Helper()
	deliver(t, g, counter, deliveries, distinct, apply, committed)
}

func deliver[Tx any](t testing.TB, g *idem.Guard, counter *idem.Counter, deliveries, distinct int, apply func(ctx context.Context, tx Tx, id string) error, committed func(id string) int) {
	t.Helper()
	ctx := context.Background()
	var applied sync.Map // id -> *atomic.Int32: applies that went through
	handler := func(ctx context.Context, tx Tx) ([]byte, error) {
		k, _ := idem.KeyFromContext(ctx)
		if err := apply(ctx, tx, k.ID); err != nil {
			return nil, err
		}
		n, _ := applied.LoadOrStore(k.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return nil, nil
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range deliveries {
		wg.Go(func() {
			<-start
			id := fmt.Sprintf("p-%d", i%distinct)
			res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte(id)}, handler)
			if err != nil || idem.Decide(res, err) != idem.ActionAck {
				t.Errorf("DoTx(%s) = %v, %v; want acked", id, res.Outcome, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range distinct {
		id := fmt.Sprintf("p-%d", i)
		if committed != nil {
			if n := committed(id); n != 1 {
				t.Fatalf("%s stored %d times, want once", id, n)
			}
			continue
		}
		if n, ok := applied.Load(id); !ok || n.(*atomic.Int32).Load() != 1 {
			t.Fatalf("%s applied %v times, want once", id, n)
		}
	}
	if p, d := counter.Count(idem.OutcomeProcessed), counter.Count(idem.OutcomeDuplicate); p != int64(distinct) || d != int64(deliveries-distinct) {
		t.Fatalf("processed %d, duplicates %d; want %d and %d", p, d, distinct, deliveries-distinct)
	}
}

// VersionRace applies versions 1 to versions of one entity at once, in a
// random order, through apply (a version guard: nil when it wrote, an error
// wrapping idem.ErrSuperseded when a newer or equal version was stored).
// It fails t unless every call is one or the other, at least one applied,
// and stored() (read after them all) reports the newest version.
func VersionRace(t testing.TB, versions int, apply func(version int64) error, stored func() int64) {
	t.Helper()
	var (
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		applied, superseded int
	)
	for _, v := range rand.Perm(versions) {
		wg.Go(func() {
			ver := int64(v + 1)
			err := apply(ver)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				applied++
			case errors.Is(err, idem.ErrSuperseded):
				superseded++
			default:
				t.Errorf("apply(v%d): %v", ver, err)
			}
		})
	}
	wg.Wait()
	if got := stored(); got != int64(versions) || applied+superseded != versions || applied < 1 {
		t.Fatalf("ended at version %d of %d; applied %d, superseded %d", got, versions, applied, superseded)
	}
}
