package brokertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// observed is an observer set on the guard alone: it keeps the settles
// and the outages the consumer engine reports to it.
type observed struct {
	mu       sync.Mutex
	settles  []idem.Settlement
	outages  []idem.Outage
	outageCh chan idem.Outage
}

var (
	_ idem.SettlementObserver = (*observed)(nil)
	_ idem.OutageObserver     = (*observed)(nil)
)

func newObserved() *observed { return &observed{outageCh: make(chan idem.Outage, 1)} }

func (o *observed) Observe(context.Context, idem.Event) {}

func (o *observed) ObserveSettlement(_ context.Context, s idem.Settlement) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settles = append(o.settles, s)
}

func (o *observed) ObserveOutage(_ context.Context, out idem.Outage) {
	o.mu.Lock()
	o.outages = append(o.outages, out)
	o.mu.Unlock()
	select {
	case o.outageCh <- out:
	default:
	}
}

// settled is one delivery's settle as "key action reason dead-lettered".
func settled(s idem.Settlement) string {
	return fmt.Sprintf("%s %s %s %t", s.Result.Key.ID, s.Action, s.Reason, s.DeadLettered)
}

func (o *observed) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, len(o.settles))
	for i, s := range o.settles {
		out[i] = settled(s)
	}
	slices.Sort(out)
	return out
}

// testObserverSeesEverySettle: an observer set on the guard, and nowhere
// else, sees exactly one settle per delivery, with the action the broker
// took (what AfterSettle saw), and a conflict's dead letter as one. A
// broker may deliver a message again (a rebalance before a commit): each
// delivery is one settle all the same.
func testObserverSeesEverySettle(t *testing.T, b Broker) {
	obs := newObserved()
	g := newGuard(t, nil, idem.Options{Observer: obs})
	eff := newEffects()
	var (
		mu    sync.Mutex
		hooks []string
	)
	c := Consumer{
		Guard:  g,
		Handle: func(ctx context.Context, m idem.Message) ([]byte, error) { eff.apply(m); return nil, nil },
		Hooks: broker.Hooks[idem.Message]{AfterSettle: func(_ context.Context, _ idem.Message, r broker.Report) {
			mu.Lock()
			defer mu.Unlock()
			hooks = append(hooks, settled(r))
		}},
	}
	r := start(t, b, c)
	fromHooks := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(hooks)
		slices.Sort(out)
		return out
	}
	state := func() string { return fmt.Sprintf("observer %v, AfterSettle %v", obs.list(), fromHooks()) }
	publish(t, b, Message{ID: "a", Payload: []byte("1")}, Message{ID: "b", Payload: []byte("1")})
	waitFor(t, "a and b settled", func() bool { return len(fromHooks()) == 2 }, state)
	publish(t, b, Message{ID: "a", Payload: []byte("1")}, Message{ID: "b", Payload: []byte("2")}) // a duplicate, a conflict
	waitDeadLetters(t, b, 1)
	waitFor(t, "four deliveries settled", func() bool { return len(fromHooks()) >= 4 && len(obs.list()) >= 4 }, state)
	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	got := obs.list()
	if hooked := fromHooks(); !slices.Equal(hooked, got) {
		t.Errorf("AfterSettle saw %q, the observer %q: one settle per delivery, the same", hooked, got)
	}
	const conflict = "b dead_letter conflict true"
	deadLettered := 0
	for _, s := range got {
		switch s {
		case "a ack  false", "b ack  false":
		case conflict:
			deadLettered++
		default:
			t.Errorf("the guard's observer saw the settle %q, want acks of a and b and b's conflict dead-lettered", s)
		}
	}
	if n := len(deadLetters(t, b)); deadLettered == 0 || deadLettered != n {
		t.Errorf("the observer saw %d dead-lettered settles, the broker holds %d dead letters (settles %q)", deadLettered, n, got)
	}
	if len(got) < 4 {
		t.Errorf("the observer saw %d settles %q, want one per delivery, at least 4", len(got), got)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, s := range obs.settles {
		if s.Result.Key.Scope != g.Options().Scope || s.Attempt < 1 {
			t.Errorf("settle %+v: want the guard's scope %q and an attempt", s, g.Options().Scope)
		}
	}
}
