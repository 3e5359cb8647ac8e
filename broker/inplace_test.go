package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/store/memory"
)

// settleCtxs is a settler of strings (each its own id) that keeps the
// context each settling call was given, and says it settles in place when
// inPlace is set.
type settleCtxs struct {
	inPlace bool
	got     map[string]context.Context // by op
}

func (s *settleCtxs) Message(m string) idem.Message           { return idem.Message{ID: m} }
func (s *settleCtxs) Delivery(string) broker.Delivery         { return broker.Delivery{Attempt: 1} }
func (s *settleCtxs) SettlesInPlace() bool                    { return s.inPlace }
func (s *settleCtxs) Ack(ctx context.Context, _ string) error { s.got["ack"] = ctx; return nil }
func (s *settleCtxs) Retry(ctx context.Context, _ string, _ time.Duration) error {
	s.got["retry"] = ctx
	return nil
}
func (s *settleCtxs) DeadLetter(ctx context.Context, _ string, _ broker.DeadLetter) error {
	s.got["dead_letter"] = ctx
	return nil
}

// TestInPlaceSettleContext: a transport that settles in place
// (broker.InPlace) has Ack and Retry called with the delivery's own
// context, as it is; any other has them called with one of their own,
// bounded and not cancelled with the handler's. A dead letter, which
// writes to the broker, always gets its own.
func TestInPlaceSettleContext(t *testing.T) {
	errFail := errors.New("handler failed")
	for _, inPlace := range []bool{false, true} {
		tr := &settleCtxs{inPlace: inPlace, got: map[string]context.Context{}}
		g, err := idem.New(memory.New(), idem.Options{Scope: "inplace"})
		if err != nil {
			t.Fatal(err)
		}
		h := broker.Handle(func(_ context.Context, m string) ([]byte, error) {
			switch m {
			case "retry":
				return nil, errFail
			case "dead_letter":
				return nil, idem.Permanent(errFail)
			}
			return nil, nil
		})
		p, err := broker.NewProcessor[string](tr, g, h, broker.Options[string]{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		for _, op := range []string{"ack", "retry", "dead_letter"} {
			if r := p.ProcessUntil(ctx, nil, op); r.BrokerErr != nil || tr.got[op] == nil {
				t.Fatalf("in place %v, %s: report %+v, the call not made", inPlace, op, r)
			}
			_, deadline := tr.got[op].Deadline()
			gotOwn := deadline && tr.got[op] != ctx
			if want := op == "dead_letter" || !inPlace; gotOwn != want {
				t.Errorf("in place %v, %s: a settle context of its own: %v, want %v", inPlace, op, gotOwn, want)
			}
		}
		cancel()
	}
}
