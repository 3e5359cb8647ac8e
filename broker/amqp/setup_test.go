package amqpidem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/testenv"
	amqp "github.com/rabbitmq/amqp091-go"
)

// env is one test's isolated RabbitMQ world: a work queue and a dead-letter
// queue with unique names, deleted at the end.
type env struct {
	url   string
	conn  *amqp.Connection
	queue string
	dlq   string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := testenv.RabbitMQ.Need(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	tag := fmt.Sprintf("%d.%d", time.Now().UnixNano(), rand.Uint32())
	e := &env{url: url, conn: conn, queue: "idemt." + tag + ".in", dlq: "idemt." + tag + ".dlq"}
	ch := e.channel(t)
	for _, q := range []string{e.queue, e.dlq} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatalf("declare %s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(e.queue, false, false, false)
			_, _ = ch.QueueDelete(e.dlq, false, false, false)
		}
		conn.Close()
	})
	return e
}

func (e *env) channel(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// publishAll publishes msgs to the work queue through the default exchange
// and waits for every publisher confirm.
func (e *env) publishAll(t testing.TB, msgs []amqp.Publishing) {
	t.Helper()
	ch := e.channel(t)
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dcs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", e.queue, false, false, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

// deadLetters takes every message of the dead-letter queue.
func (e *env) deadLetters(t testing.TB) []amqp.Delivery {
	t.Helper()
	ch := e.channel(t)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(e.dlq, true)
		if err != nil {
			t.Fatalf("get dead letter: %v", err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// tracker records the published copies whose fate is sealed (acked, or
// dead-lettered and acked) and closes done when all of them are.
type tracker struct {
	mu     sync.Mutex
	want   int
	sealed map[string]bool
	counts map[idem.Outcome]int
	done   chan struct{}
}

func newTracker(want int) *tracker {
	return &tracker{want: want, sealed: map[string]bool{}, counts: map[idem.Outcome]int{}, done: make(chan struct{})}
}

func (tr *tracker) onResult(d amqp.Delivery, r amqpidem.Report) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.counts[r.Result.Outcome]++
	if r.BrokerErr == nil && r.Action != idem.ActionRetry {
		tr.sealed[amqpidem.HeaderString(d.Headers["x-test-copy"])] = true
		if len(tr.sealed) == tr.want {
			select {
			case <-tr.done:
			default:
				close(tr.done)
			}
		}
	}
}

func (tr *tracker) count(o idem.Outcome) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.counts[o]
}

func (tr *tracker) settled() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.sealed)
}

// awaitCrashed waits for the consumer whose connection a handler closed
// (handled counts its handler calls): it must stop by itself, long before
// the others finish, with ErrDeliveriesClosed.
func awaitCrashed(t *testing.T, errX <-chan error, handled *atomic.Int64) {
	t.Helper()
	select {
	case err := <-errX:
		if !errors.Is(err, amqpidem.ErrDeliveriesClosed) {
			t.Errorf("the crashed consumer's Consume returned %v, want ErrDeliveriesClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the crashing consumer handled %d messages and did not stop", handled.Load())
	}
}

// dial opens a connection of its own for a consumer whose connection the
// test closes from inside a handler; it is closed at the end in any case.
func (e *env) dial(t testing.TB) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(e.url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return conn, ch
}

// withRetries returns the unique messages mk builds, every fourth one twice
// (a producer retry: RabbitMQ enqueues it again), each copy tagged with an
// x-test-copy header so that the tracker tells copies apart.
func withRetries(unique int, mk func(i int) amqp.Publishing) []amqp.Publishing {
	var msgs []amqp.Publishing
	for i := range unique {
		m := mk(i)
		msgs = append(msgs, m)
		if i%4 == 0 {
			msgs = append(msgs, m)
		}
	}
	for i := range msgs {
		msgs[i].Headers = amqp.Table{"x-test-copy": int64(i)}
	}
	return msgs
}
