package integration_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	amqpidem "github.com/idemgo/idem/broker/amqp"
	"github.com/idemgo/idem/store/memory"
)

// TestQuorumLastDelivery: on a quorum queue with x-delivery-limit 2 and
// MaxDeliveries 2, the consumer takes the second delivery as the last and
// keeps the broker's third, the spare, for a crash. The first delivery
// fails and is requeued; the consumer dies holding the second (its
// connection closes, which RabbitMQ counts); the third is held until the
// dead holder's lease ends, retaken, fails, and is dead-lettered by the
// consumer with max_deliver and idem's headers, not by RabbitMQ (whose
// own dead letter, through the queue's x-dead-letter-exchange, carries
// only x-death) and not dropped.
func TestQuorumLastDelivery(t *testing.T) {
	e := newEnv(t)
	q := e.queue + ".limit"
	ch := e.channel(t)
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(2),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": e.dlq}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ch, err := e.conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
	g, err := amqpidem.NewGuard(memory.New(), q, idem.Options{Lease: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	h := amqpidem.Handle(func(ctx context.Context, d amqp.Delivery) ([]byte, error) {
		if amqpidem.HeaderString(d.Headers["x-delivery-count"]) == "1" {
			close(holding) // the last delivery the consumer allows
			<-release
		}
		return nil, errors.New("downstream down")
	})
	reports := make(chan broker.Report, 10)
	run := func(ctx context.Context, conn *amqp.Connection) <-chan error {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- amqpidem.Consume(ctx, ch, g, h, amqpidem.Options{Queue: q, DeadLetterRoutingKey: e.dlq,
				MaxDeliveries: 2, Backoff: fastBackoff,
				Hooks: broker.Hooks[amqp.Delivery]{AfterSettle: func(_ context.Context, _ amqp.Delivery, r broker.Report) { reports <- r }}})
		}()
		return done
	}
	dial := func() *amqp.Connection {
		conn, err := amqp.Dial(e.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	first := dial()
	firstDone := run(context.Background(), first)
	e.publishTo(t, q, amqp.Publishing{MessageId: "o-1", Body: []byte(`{"amount":3}`)})
	if r := <-reports; r.Action != idem.ActionRetry || r.Attempt != 1 || r.BrokerErr != nil {
		t.Fatalf("first delivery: %+v; want requeued", r)
	}
	<-holding
	first.Close() // the crash: RabbitMQ returns the delivery and counts it
	close(release)
	if err := <-firstDone; !errors.Is(err, amqpidem.ErrDeliveriesClosed) || !errors.Is(err, broker.ErrClosed) {
		t.Fatalf("Run after the crash = %v, want ErrDeliveriesClosed (broker.ErrClosed)", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	secondDone := run(ctx, dial())
	var r broker.Report
	for r = <-reports; r.BrokerErr != nil; r = <-reports { // the crashed consumer's failed settle
	}
	if r.Action != idem.ActionDeadLetter || r.Reason != broker.ReasonMaxDeliver || r.Attempt != 3 {
		t.Fatalf("third delivery: %+v; want dead-lettered max_deliver by the consumer", r)
	}
	dls := e.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Headers[idem.HeaderReason] != broker.ReasonMaxDeliver || dl.Headers[idem.HeaderDeadLetterKey] == nil ||
		amqpidem.HeaderString(dl.Headers[amqpidem.HeaderAttempt]) != strconv.Itoa(3) || dl.Headers["x-death"] != nil {
		t.Fatalf("dead letter headers %v; want idem's, attempt 3, no x-death", dl.Headers)
	}
	stop()
	if err := <-secondDone; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if n := e.queued(t, q); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
}

// downStore refuses every claim while down, as a store that cannot be
// reached does, and signals each refusal.
type downStore struct {
	*memory.Store
	down    atomic.Bool
	refused chan struct{}
}

func (s *downStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if s.down.Load() {
		select {
		case s.refused <- struct{}{}:
		default:
		}
		return idem.Claim{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return s.Store.Claim(ctx, req)
}

// TestStoreOutageSpendsNoDelivery: on a quorum queue with x-delivery-limit
// 1, a delivery whose store cannot be reached is held unacked and claimed
// again on the back-off, many times over the broker's limit, and is
// processed on its first delivery once the store is back: RabbitMQ never
// counted a redelivery, nothing is dead-lettered, and the outage reached
// OnError.
func TestStoreOutageSpendsNoDelivery(t *testing.T) {
	e := newEnv(t)
	q := e.quorum(t, 1)
	store := &downStore{Store: memory.New(), refused: make(chan struct{})}
	store.down.Store(true)
	g, err := amqpidem.NewGuard(store, q, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	outages := make(chan error, 100)
	results, stop := e.consume(t, g, amqpidem.Handle(func(context.Context, amqp.Delivery) ([]byte, error) { return nil, nil }),
		amqpidem.Options{Queue: q, MaxDeliveries: 1, Backoff: fastBackoff,
			Hooks: broker.Hooks[amqp.Delivery]{OnError: func(err error) { outages <- err }}})
	e.publishTo(t, q, amqp.Publishing{MessageId: "o-9", Body: []byte(`{"amount":1}`)})
	for range 5 {
		<-store.refused
	}
	store.down.Store(false)
	res := <-results
	stop()
	if res.r.Action != idem.ActionAck || res.r.Result.Outcome != idem.OutcomeProcessed || res.r.Attempt != 1 || res.d.Redelivered {
		t.Fatalf("report %+v (redelivered %v); want processed on its first delivery", res.r, res.d.Redelivered)
	}
	var oe *broker.OutageError
	if err := <-outages; !errors.As(err, &oe) {
		t.Fatalf("OnError got %v, want a *broker.OutageError", err)
	}
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %v", dls[0].Headers)
	}
	if n := e.queued(t, q); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
}
