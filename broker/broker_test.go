package broker_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

type msg struct{ id string }

func TestHandlerCheck(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (broker.Handler[msg]{}).Check(g); !errors.Is(err, broker.ErrNoHandler) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("zero handler: %v", err)
	}
	if err := broker.Handle[msg](nil).Check(g); !errors.Is(err, broker.ErrNoHandler) {
		t.Fatalf("Handle(nil): %v", err)
	}
	tx := broker.HandleTx(func(context.Context, *sql.Tx, msg) ([]byte, error) { return nil, nil })
	if err := tx.Check(g); !errors.Is(err, idem.ErrNoTx) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("HandleTx over a store without *sql.Tx: %v", err)
	}
	h := broker.Handle(func(_ context.Context, m msg) ([]byte, error) { return []byte(m.id), nil })
	if err := h.Check(g); err != nil {
		t.Fatal(err)
	}
	res, err := h.Run(context.Background(), g, idem.Message{ID: "1"}, msg{"r"})
	if err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "r" {
		t.Fatalf("Run: %v %v", res, err)
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	backoff := func(a int) time.Duration { return time.Duration(a) * time.Second }
	r := broker.Decide(idem.Result{}, errors.New("transient"), now, 3, backoff)
	if r.Action != idem.ActionRetry || r.Delay != 3*time.Second || r.Attempt != 3 {
		t.Fatalf("transient: %+v", r)
	}
	rec := idem.Record{State: idem.StateInProgress, LeaseUntil: now.Add(time.Minute)}
	r = broker.Decide(idem.Result{Record: rec}, &idem.StateError{Err: idem.ErrInProgress, Record: rec}, now, 1, backoff)
	if r.Action != idem.ActionRetry || r.Delay < time.Minute {
		t.Fatalf("in progress: delay %v, want the holder's lease", r.Delay)
	}
	r = broker.Decide(idem.Result{}, &idem.ConflictError{}, now, 1, backoff)
	if r.Action != idem.ActionDeadLetter || r.Reason != "conflict" {
		t.Fatalf("conflict: %+v", r)
	}
	r = broker.Decide(idem.Result{}, nil, now, 1, backoff)
	if r.Action != idem.ActionAck || r.Reason != "" || r.Delay != 0 {
		t.Fatalf("processed: %+v", r)
	}
}

func TestHooksNilSafe(t *testing.T) {
	var h broker.Hooks[msg]
	h.CallBeforeSettle(context.Background(), msg{}, broker.Report{})
	h.CallAfterSettle(context.Background(), msg{}, broker.Report{})
	h.CallOnDeadLetter(context.Background(), msg{}, broker.Report{})
	h.CallOnError(errors.New("x"))
	var got []string
	h = broker.Hooks[msg]{
		BeforeSettle: func(context.Context, msg, broker.Report) { got = append(got, "before") },
		AfterSettle:  func(context.Context, msg, broker.Report) { got = append(got, "after") },
		OnError:      func(error) { got = append(got, "error") },
	}
	h.CallBeforeSettle(context.Background(), msg{}, broker.Report{})
	h.CallAfterSettle(context.Background(), msg{}, broker.Report{})
	h.CallOnError(nil)
	h.CallOnError(errors.New("x"))
	if len(got) != 3 || got[0] != "before" || got[1] != "after" || got[2] != "error" {
		t.Fatalf("hooks ran %v", got)
	}
}

func TestRunTicket(t *testing.T) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	tickets, err := g.ClaimBatch(context.Background(), []idem.Message{{ID: "1"}, {ID: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	h := broker.Handle(func(_ context.Context, m msg) ([]byte, error) { return []byte(m.id), nil })
	res, err, ok := h.RunTicket(context.Background(), tickets[0], msg{"a"})
	if !ok || err != nil || res.Outcome != idem.OutcomeProcessed || string(res.Value) != "a" {
		t.Fatalf("RunTicket: %v %v %v", res, err, ok)
	}
	tx := broker.HandleTx(func(context.Context, *sql.Tx, msg) ([]byte, error) { return nil, nil })
	if _, _, ok := tx.RunTicket(context.Background(), tickets[1], msg{"b"}); ok {
		t.Fatal("a HandleTx handler ran under a ticket")
	}
}
