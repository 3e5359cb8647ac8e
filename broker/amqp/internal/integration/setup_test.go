package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem/internal/testenv"
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
