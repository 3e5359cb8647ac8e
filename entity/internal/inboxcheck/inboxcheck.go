// Package inboxcheck holds the checks that entity.Store and entitypgx.Store
// share: a record-less TxStore is not an idem.Store, and a guard made over
// it with idem.NewInbox refuses two-phase work without running the handler.
package inboxcheck

import (
	"context"
	"errors"
	"reflect"
	"strings"
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
