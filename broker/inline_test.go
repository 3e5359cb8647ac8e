package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// At Concurrency 1 (the default) Run handles deliveries on its own
// goroutine until one is held in progress elsewhere, and a worker from
// then on: one handler at a time throughout, the held delivery claimed
// again while Run waits in Receive with nothing to receive, and the
// deliveries after it handled as before.
func TestEngineConcurrencyOneOneAtATime(t *testing.T) {
	f := newFake()
	var running, most atomic.Int32
	e := newEngine(t, f, nil, idem.Options{Lease: 30 * time.Second}, func(context.Context, *fmsg) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond)
		return nil, nil
	}, broker.Options[*fmsg]{Backoff: fixed(10 * time.Millisecond)})
	held := &fmsg{id: "held", payload: "p"}
	finish := holdElsewhere(t, e.g, held)
	f.in <- held
	waitFor(t, "held", func() bool { return e.seen.get(idem.OutcomeInProgress) >= 1 })
	for _, id := range []string{"b", "c", "d"} {
		f.in <- &fmsg{id: id, payload: "p"}
	}
	if acked := f.nextOf(t, 3, "ack", "b, c and d acked while the first is held"); !acked["b"] || !acked["c"] || !acked["d"] {
		t.Fatalf("acked %v, want b, c and d", acked)
	}
	// Nothing more to receive: the held delivery is claimed again by the
	// worker while Run waits in Receive.
	finish(errors.New("holder's handler failed"))
	if c := f.next(t); c.op != "ack" || c.id != "held" {
		t.Fatalf("%s %s, want the held delivery acked once its holder released it", c.op, c.id)
	}
	for _, id := range []string{"e", "f"} {
		f.in <- &fmsg{id: id, payload: "p"}
	}
	if acked := f.nextOf(t, 2, "ack", "e and f acked after the hold"); !acked["e"] || !acked["f"] {
		t.Fatalf("acked %v, want e and f", acked)
	}
	if n := e.runs.Load(); n != 6 {
		t.Fatalf("handler ran %d times, want 6", n)
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d handlers ran at once at Concurrency 1, want 1", m)
	}
	e.stop(t)
}

// A handler Run runs itself (Concurrency 1) is cancelled ShutdownTimeout
// after Run's context ends, as a worker's is, and Run then returns.
func TestEngineConcurrencyOneShutdownTimeout(t *testing.T) {
	f := newFake()
	const shutdown = 200 * time.Millisecond
	started, ended := make(chan struct{}), make(chan time.Time, 1)
	e := newEngine(t, f, nil, idem.Options{}, func(ctx context.Context, _ *fmsg) ([]byte, error) {
		close(started)
		<-ctx.Done()
		ended <- time.Now()
		return nil, ctx.Err()
	}, broker.Options[*fmsg]{Concurrency: 1, ShutdownTimeout: shutdown})
	f.in <- &fmsg{id: "a", payload: "p"}
	<-started
	stopped := time.Now()
	e.stop(t)
	select {
	case at := <-ended:
		if took := at.Sub(stopped); took < shutdown || took > 10*time.Second {
			t.Fatalf("the handler's context ended %v after the stop, want ShutdownTimeout (%v)", took, shutdown)
		}
	default:
		t.Fatal("Run returned before its handler did")
	}
}
