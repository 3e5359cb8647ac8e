package amqpidem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestEffectivelyOnce publishes 2000 unique orders plus producer retries
// (same message-id and body: RabbitMQ enqueues them again), conflicting
// re-uses of ids, permanent failures and messages without an id, in random
// order. Three consumers compete; one of them, on its own connection, closes
// the connection from inside a handler a tenth of the way through, so its
// unacked deliveries (finished ones included) are redelivered to the others.
// Every order must be applied exactly once, and every conflict, permanent
// failure and keyless message must reach the dead-letter queue with its
// reason.
func TestEffectivelyOnce(t *testing.T) {
	e := newEnv(t)
	const (
		unique    = 2000
		perms     = 10
		keyless   = 5
		conflicts = 20
		dups      = 400
	)
	isDup := func(i int) bool { return i%5 == 0 }
	isConflict := func(i int) bool { return i%100 == 1 }
	isTransient := func(i int) bool { return i%25 == 2 }
	var msgs []amqp.Publishing
	add := func(id string, body []byte) {
		msgs = append(msgs, amqp.Publishing{MessageId: id, ContentType: "application/json", Body: body,
			Headers: amqp.Table{"tenant": "acme"}})
	}
	for i := 0; i < unique; i++ {
		id := fmt.Sprintf("order-%d", i)
		body := fmt.Appendf(nil, `{"order":%d,"amount":%d}`, i, 100+i)
		add(id, body)
		if isDup(i) {
			add(id, body)
		}
		if isConflict(i) {
			add(id, fmt.Appendf(nil, `{"order":%d,"amount":%d}`, i, 999999))
		}
	}
	for i := 0; i < perms; i++ {
		add(fmt.Sprintf("perm-%d", i), []byte(`{"bad":true}`))
	}
	for i := 0; i < keyless; i++ {
		add("", fmt.Appendf(nil, `{"keyless":%d}`, i))
	}
	rand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for i := range msgs {
		msgs[i].Headers["x-test-copy"] = int64(i)
	}
	total := len(msgs)
	if total != unique+dups+conflicts+perms+keyless {
		t.Fatalf("built %d messages", total)
	}
	e.publishAll(t, msgs)

	store := memory.New()
	var fx consumetest.Effects
	var failedMu sync.Mutex
	failed := map[string]bool{}
	work := func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		id := d.MessageId
		if strings.HasPrefix(id, "perm-") {
			return nil, idem.Permanent(errors.New("order rejected"))
		}
		var n int
		if _, err := fmt.Sscanf(id, "order-%d", &n); err == nil && isTransient(n) {
			failedMu.Lock()
			first := !failed[id]
			failed[id] = true
			failedMu.Unlock()
			if first {
				return nil, errors.New("payment service unavailable")
			}
		}
		fx.Add(id)
		return []byte("charged " + id), nil
	}
	tr := newTracker(total)
	opts := amqpidem.Options{
		Queue:                e.queue,
		DeadLetterRoutingKey: e.dlq,
		Concurrency:          4,
		Prefetch:             16,
		Backoff:              idem.ExponentialBackoff(20*time.Millisecond, 200*time.Millisecond),
		OnResult:             tr.onResult,
	}
	newGuard := func() *idem.Guard {
		g, err := amqpidem.NewGuard(store, e.queue, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	xStarted := make(chan struct{}) // the others join once the crashing consumer is busy
	for range 2 {
		ch, g := e.channel(t), newGuard()
		go func() {
			select {
			case <-xStarted:
			case <-ctx.Done():
			}
			errs <- amqpidem.Consume(ctx, ch, g, amqpidem.Handle(work), opts)
		}()
	}

	// The crashing consumer: its connection dies after a handler's work
	// is recorded but before the ack.
	connX, chX := e.dial(t)
	var handledX atomic.Int64
	errX := make(chan error, 1)
	gX := newGuard()
	go func() {
		errX <- amqpidem.Consume(ctx, chX, gX, amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
			v, err := work(ctx, d)
			switch handledX.Add(1) {
			case 10:
				close(xStarted)
			case int64(total / 10):
				connX.Close()
			}
			return v, err
		}), opts)
	}()

	consumetest.AwaitSettled(t, tr.done, errs, tr.settled, total)
	awaitCrashed(t, errX, &handledX)
	cancel()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Consume returned %v after shutdown, want nil", err)
		}
	}
	tr.mu.Lock()
	t.Logf("outcomes: %v", tr.counts)
	tr.mu.Unlock()

	consumetest.AppliedOnce(t, "applied", fx.Snapshot(), unique)
	if d := tr.count(idem.OutcomeDuplicate); d < dups {
		t.Errorf("%d duplicates detected, want at least the %d producer retries", d, dups)
	}

	// A dead letter whose original's ack was lost with the connection is
	// published again on redelivery (RabbitMQ has no duplicate detection):
	// count distinct published copies.
	reasons := map[string]int{}
	copies := map[string]bool{}
	for _, dl := range e.deadLetters(t) {
		reason := amqpidem.HeaderString(dl.Headers[amqpidem.HeaderReason])
		if cp := amqpidem.HeaderString(dl.Headers["x-test-copy"]); !copies[cp] {
			copies[cp] = true
			reasons[reason]++
		}
		if amqpidem.HeaderString(dl.Headers[amqpidem.HeaderError]) == "" ||
			amqpidem.HeaderString(dl.Headers[amqpidem.HeaderQueue]) != e.queue ||
			amqpidem.HeaderString(dl.Headers["tenant"]) != "acme" {
			t.Errorf("dead letter lacks error, queue or original headers: %v", dl.Headers)
		}
		if reason == "conflict" {
			var n int
			if _, err := fmt.Sscanf(dl.MessageId, "order-%d", &n); err != nil || !isConflict(n) {
				t.Errorf("conflict dead letter for unexpected id %q", dl.MessageId)
			}
		}
	}
	want := map[string]int{"conflict": conflicts, "permanent": perms, "no_key": keyless}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("dead letters by reason = %v, want %v", reasons, want)
	}
}
