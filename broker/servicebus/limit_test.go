package servicebus_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/store/memory"
)

// The tests of what happens at the entity's MaxDeliveryCount and while
// the store cannot be reached, on the in-process Service Bus.

// limitQueue creates the queue "orders" with opts on a new server, sends
// it the message "order-1" and returns a client and a receiver of the
// queue's dead letters.
func limitQueue(t *testing.T, opts servicebustest.QueueOptions) (*servicebustest.Server, *azservicebus.Client, *azservicebus.Receiver) {
	t.Helper()
	srv := newServer(t)
	if err := srv.CreateQueue("orders", opts); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, srv)
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := "order-1"
	if err := s.SendMessage(context.Background(), &azservicebus.Message{MessageID: &id, Body: []byte(`{"amount":10}`)}, nil); err != nil {
		t.Fatal(err)
	}
	dlq, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client, dlq
}

// runConsumer runs a consumer of "orders" on client until the returned
// stop is called, which waits for Run and returns its error.
func runConsumer(t *testing.T, client *azservicebus.Client, g *idem.Guard, h servicebus.Handler, opts servicebus.Options) (stop func() error) {
	t.Helper()
	r, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.EntityPath = "orders"
	if opts.Hooks.OnError == nil {
		opts.Hooks.OnError = func(err error) { t.Log("consumer:", err) }
	}
	c, err := servicebus.NewConsumer(r, g, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var runErr error
	return func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
}

// deadLetter receives the one dead letter of the queue, failing the test
// rather than hanging when none comes.
func deadLetter(t *testing.T, dlq *azservicebus.Receiver) *azservicebus.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("dead-letter queue: %d messages, %v", len(msgs), err)
	}
	if err := dlq.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	return msgs[0]
}

func fixed(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// TestDeliveryLimit: a message whose handler always fails, on a queue
// with MaxDeliveryCount 3. With MaxDeliveries set to it, the consumer
// never abandons the third delivery (Service Bus would dead-letter it
// with none of idem's properties): it dead-letters it itself, reason
// max_deliver, with idem's properties and the message's position. With
// MaxDeliveries unknown (0), Service Bus dead-letters it at its limit with
// MaxDeliveryCountExceeded and none of them: nothing is lost either way,
// and Replay takes both.
func TestDeliveryLimit(t *testing.T) {
	for _, tc := range []struct {
		name          string
		maxDeliveries int
		reason        string
	}{
		{"MaxDeliveries", 3, servicebus.ReasonMaxDeliver},
		{"unknown", 0, servicebus.ReasonMaxDeliveryCountExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, client, dlq := limitQueue(t, servicebustest.QueueOptions{MaxDeliveryCount: 3})
			g, err := servicebus.NewGuard(memory.New(), "orders", idem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			counts := make(chan uint32, 8)
			var fail atomic.Bool
			fail.Store(true)
			applied := make(chan uint32, 1)
			h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
				if fail.Load() {
					counts <- m.DeliveryCount
					return nil, errors.New("downstream down")
				}
				applied <- m.DeliveryCount
				return nil, nil
			})
			stop := runConsumer(t, client, g, h, servicebus.Options{MaxDeliveries: tc.maxDeliveries, Backoff: fixed(10 * time.Millisecond)})
			defer func() { _ = stop() }()

			dl := deadLetter(t, dlq)
			if n := len(counts); n != 3 {
				t.Fatalf("the handler failed %d times, want 3", n)
			}
			for want := uint32(1); want <= 3; want++ {
				if n := <-counts; n != want {
					t.Fatalf("failure %d on DeliveryCount %d", want, n)
				}
			}
			if dl.DeadLetterReason == nil || *dl.DeadLetterReason != tc.reason {
				t.Fatalf("DeadLetterReason %v, want %q", dl.DeadLetterReason, tc.reason)
			}
			p := dl.ApplicationProperties
			if tc.maxDeliveries > 0 {
				if p[idem.HeaderReason] != servicebus.ReasonMaxDeliver || p[idem.HeaderFingerprint] == nil ||
					p[servicebus.HeaderEntity] != "orders" || p[servicebus.HeaderDeliveryCount] != "3" ||
					p[servicebus.HeaderSequenceNumber] == nil || p[servicebus.HeaderMessageID] != "order-1" ||
					dl.DeadLetterErrorDescription == nil || *dl.DeadLetterErrorDescription != "downstream down" {
					t.Fatalf("consumer's dead letter: description %v, properties %v", dl.DeadLetterErrorDescription, p)
				}
			} else if p[idem.HeaderReason] != nil {
				t.Fatalf("Service Bus's dead letter carries idem's properties: %v", p)
			}

			s, err := client.NewSender("orders", nil)
			if err != nil {
				t.Fatal(err)
			}
			fail.Store(false)
			if err := servicebus.Replay(context.Background(), s, dl); err != nil {
				t.Fatal(err)
			}
			if n := <-applied; n != 1 {
				t.Fatalf("replayed message delivered with DeliveryCount %d", n)
			}
			if err := stop(); err != nil { // Run returns once the replay is settled
				t.Errorf("Run: %v", err)
			}
			rec, err := g.Store().Get(context.Background(), idem.Key{Scope: "orders", ID: "order-1"})
			if err != nil || rec.State != idem.StateCompleted {
				t.Fatalf("record %+v (%v): want completed after the replay", rec, err)
			}
			if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) {
				t.Fatalf("queue %+v, want empty", st)
			}
		})
	}
}

// outageStore refuses connections while down, as a PostgreSQL being
// restarted does, and closes enough after that many refused claims.
type outageStore struct {
	idem.Store
	down    atomic.Bool
	refused atomic.Int32
	want    int32
	enough  chan struct{}
}

func (s *outageStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if s.down.Load() {
		if s.refused.Add(1) == s.want {
			close(s.enough)
		}
		return idem.Claim{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return s.Store.Claim(ctx, req)
}

// TestStoreOutageSpendsNoDelivery: while the store refuses connections
// for many lock durations, on a queue with MaxDeliveryCount 2 (one lock
// expiry away from Service Bus's dead letter), the message is held, its
// lock renewed: no abandon, no lock expiry, no dead letter, the outage
// reported as a broker.OutageError. Once the store is back the message is
// processed on its first delivery.
func TestStoreOutageSpendsNoDelivery(t *testing.T) {
	const lock = 300 * time.Millisecond
	srv, client, _ := limitQueue(t, servicebustest.QueueOptions{LockDuration: lock, MaxDeliveryCount: 2})
	store := &outageStore{Store: memory.New(), want: 60, enough: make(chan struct{})}
	store.down.Store(true)
	g, err := servicebus.NewGuard(store, "orders", idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		runs.Add(1)
		return nil, nil
	})
	outages := make(chan error, 16)
	reports := make(chan broker.Report, 4)
	stop := runConsumer(t, client, g, h, servicebus.Options{MaxDeliveries: 2, Backoff: fixed(25 * time.Millisecond), // 60 claims: 5 locks
		Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
			OnError: func(err error) {
				t.Log("consumer:", err)
				select {
				case outages <- err:
				default:
				}
			},
			AfterSettle: func(_ context.Context, m *azservicebus.ReceivedMessage, r broker.Report) { reports <- r },
		}})
	defer func() { _ = stop() }()

	<-store.enough
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{Locked: 1}) {
		t.Fatalf("queue %+v after %d refused claims, want the message locked", st, store.refused.Load())
	}
	var oe *broker.OutageError
	if err := <-outages; !errors.As(err, &oe) {
		t.Fatalf("OnError: %v, want a *broker.OutageError", err)
	}
	store.down.Store(false)
	r := <-reports
	if r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.Attempt != 1 || r.BrokerErr != nil {
		t.Fatalf("%s %s (%v) on delivery %d, settle %v; want processed and completed on the first", r.Action, r.Result.Outcome, r.Err, r.Attempt, r.BrokerErr)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) {
		t.Fatalf("queue %+v, want empty", st)
	}
}

// TestLastDeliveryCrash: a consumer dies (its connection closed) holding
// the message's last allowed delivery (MaxDeliveryCount 1). It cannot
// dead-letter it; Service Bus does when the lock expires, with
// MaxDeliveryCountExceeded: the message is not lost, and its replay is
// processed once.
func TestLastDeliveryCrash(t *testing.T) {
	srv, client, dlq := limitQueue(t, servicebustest.QueueOptions{LockDuration: 300 * time.Millisecond, MaxDeliveryCount: 1})
	g, err := servicebus.NewGuard(memory.New(), "orders", idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var crashed atomic.Bool
	applied := make(chan struct{}, 2)
	h := servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		if !crashed.Load() {
			close(started)
			<-ctx.Done() // killed in the middle
			return nil, ctx.Err()
		}
		applied <- struct{}{}
		return nil, nil
	})
	opts := servicebus.Options{MaxDeliveries: 1, ShutdownTimeout: time.Millisecond}
	dying := newClient(t, srv)
	stop := runConsumer(t, dying, g, h, opts)
	<-started
	crashed.Store(true)
	dying.Close(context.Background()) // no settlement reaches Service Bus now
	_ = stop()                        // its Run reports the closed connection

	dl := deadLetter(t, dlq)
	if dl.DeadLetterReason == nil || *dl.DeadLetterReason != servicebus.ReasonMaxDeliveryCountExceeded || dl.MessageID != "order-1" {
		t.Fatalf("dead letter %q, reason %v", dl.MessageID, dl.DeadLetterReason)
	}
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := servicebus.Replay(context.Background(), s, dl); err != nil {
		t.Fatal(err)
	}
	stop = runConsumer(t, client, g, h, opts)
	<-applied
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) || len(applied) != 0 {
		t.Fatalf("queue %+v, %d more applications; want empty and one", st, len(applied))
	}
}
