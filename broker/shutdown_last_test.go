package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// At shutdown a delivery received but not started that is the broker's
// last allowed one (here in a Drainer's buffer) is not given back, which
// would have the broker drop it (JetStream) or dead-letter it without
// idem's headers (Service Bus): it is handled like one in flight.
func TestEngineShutdownHandlesUnstartedLast(t *testing.T) {
	f := newFake()
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newEngine(t, f, nil, idem.Options{}, func(ctx context.Context, _ *fmsg) ([]byte, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done(): // the test failed: ShutdownTimeout ends it
			return nil, ctx.Err()
		}
	}, broker.Options[*fmsg]{Concurrency: 1, ShutdownTimeout: 10 * time.Second})
	f.in <- &fmsg{id: "a", payload: "p"}
	<-started
	f.in <- &fmsg{id: "b", payload: "p", attempt: 5, last: true}
	f.in <- &fmsg{id: "c", payload: "p"}
	e.cancel()
	if c := f.next(t); c.op != "return" || c.id != "c" {
		t.Fatalf("%s %s, want c returned", c.op, c.id)
	}
	close(release)
	acked := f.nextOf(t, 2, "ack", "a and b acked")
	if !acked["a"] || !acked["b"] {
		t.Fatalf("acked %v, want a and b", acked)
	}
	e.stop(t)
}
