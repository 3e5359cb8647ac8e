package consume_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/consume"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
)

func guard(t *testing.T, s idem.Store) *idem.Guard {
	t.Helper()
	g, err := idem.New(s, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNilHandlers(t *testing.T) {
	if consume.Handle[string](nil) != nil {
		t.Error("Handle(nil) is not nil")
	}
	if consume.HandleTx[*consumetest.Tx, string](nil) != nil {
		t.Error("HandleTx(nil) is not nil")
	}
}

// TestHandleRunsOnce: fn sees the broker's message and runs once per key;
// the duplicate replays its result.
func TestHandleRunsOnce(t *testing.T) {
	g := guard(t, memory.New())
	calls := 0
	h := consume.Handle(func(ctx context.Context, msg string) ([]byte, error) {
		calls++
		return []byte("done " + msg), nil
	})
	if err := consume.Check(h, g); err != nil {
		t.Fatalf("Check = %v", err)
	}
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		res, err := consume.Run(context.Background(), h, g, idem.Message{ID: "k"}, "m")
		if err != nil || res.Outcome != want || string(res.Value) != "done m" {
			t.Fatalf("run %d = %+v, %v; want %v with the result", i, res, err, want)
		}
	}
	if calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

// TestHandleTx: Check refuses a store without an inbox for Tx; with one, a
// failed fn rolls its writes back and the retry commits them once.
func TestHandleTx(t *testing.T) {
	fail := true
	h := consume.HandleTx(func(ctx context.Context, tx *consumetest.Tx, msg string) ([]byte, error) {
		tx.Charge(msg)
		if fail {
			fail = false
			return nil, errors.New("deadlock")
		}
		return nil, nil
	})
	if err := consume.Check(h, guard(t, memory.New())); !errors.Is(err, idem.ErrNoTx) || !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("Check on a store without Tx = %v, want ErrNoTx and ErrInvalidOptions", err)
	}
	st := consumetest.NewTxStore()
	g := guard(t, st)
	if err := consume.Check(h, g); err != nil {
		t.Fatalf("Check = %v", err)
	}
	for range 3 {
		_, _ = consume.Run(context.Background(), h, g, idem.Message{ID: "k"}, "order-1")
	}
	consumetest.AppliedOnce(t, "committed", st.CommittedOrders(), 1)
}
