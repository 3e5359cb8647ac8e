package servicebus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/store/memory"
)

// crashedStore is the store as a crashed process leaves it: once dead,
// none of its calls reach the store (its heartbeat stops renewing, its
// handler's claim is never completed nor released).
type crashedStore struct {
	idem.Store
	dead atomic.Bool
}

var errGone = errors.New("the process is gone")

func (s *crashedStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	if s.dead.Load() {
		return errGone
	}
	return s.Store.Renew(ctx, req)
}

func (s *crashedStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if s.dead.Load() {
		return errGone
	}
	return s.Store.Complete(ctx, req)
}

func (s *crashedStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if s.dead.Load() {
		return errGone
	}
	return s.Store.Release(ctx, req)
}

// runSessions runs a session consumer of "orders" on a client of its own
// until the returned kill closes that client, as a crash would, and
// cancels the run.
func runSessions(t *testing.T, srv *servicebustest.Server, g *idem.Guard, h servicebus.Handler, opts servicebus.Options) (kill func()) {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	opts.Hooks.OnError = func(err error) { t.Log("consumer:", err) }
	c, err := servicebus.NewSessionConsumer(client, "orders", g, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			client.Close(context.Background())
			cancel()
			<-done
		})
	}
	t.Cleanup(kill)
	return kill
}

// TestSessionHolderCrash: the consumer holding a session is killed while
// its handler runs a message (its claim left in progress, orphaned). The
// session goes to the next consumer, which holds that message until the
// orphaned claim's lease ends, retakes it, and then handles the rest of
// the session: every message applied once, in the session's order,
// nothing dead-lettered.
func TestSessionHolderCrash(t *testing.T) {
	const lease = time.Second
	srv := newServer(t)
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{LockDuration: 2 * time.Second, RequiresSession: true}); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, srv)
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	session := "order-42"
	for i := range 5 {
		id := fmt.Sprint("step-", i)
		if err := s.SendMessage(context.Background(), &azservicebus.Message{MessageID: &id, SessionID: &session, Body: []byte(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	store := memory.New()
	var (
		mu      sync.Mutex
		applied []string
	)
	apply := func(m *azservicebus.ReceivedMessage) {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, m.MessageID)
	}
	opts := servicebus.Options{Options: servicebus.ConsumerOptions{Backoff: fixed(20 * time.Millisecond), ShutdownTimeout: 100 * time.Millisecond}}

	crashed := &crashedStore{Store: store}
	gA, err := servicebus.NewGuard(crashed, "orders", idem.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	killA := runSessions(t, srv, gA, servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		if m.MessageID == "step-1" {
			close(running)
			<-ctx.Done() // the crash comes first
			return nil, ctx.Err()
		}
		apply(m)
		return nil, nil
	}), opts)
	<-running
	crashed.dead.Store(true)
	killA()

	gB, err := servicebus.NewGuard(store, "orders", idem.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan broker.Report, 16)
	optsB := opts
	optsB.Hooks.AfterSettle = func(_ context.Context, _ *azservicebus.ReceivedMessage, r broker.Report) { held <- r }
	runSessions(t, srv, gB, servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		apply(m)
		return nil, nil
	}), optsB)

	deadline := time.After(30 * time.Second)
	for n := 0; n < 4; {
		select {
		case r := <-held:
			if r.Action == idem.ActionAck {
				n++
			}
		case <-deadline:
			t.Fatalf("the survivor did not finish the session: applied %v", applied)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"step-0", "step-1", "step-2", "step-3", "step-4"}
	if fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want %v once each, in order", applied, want)
	}
	rec, err := store.Get(context.Background(), idem.Key{Scope: "orders", ID: "step-1"})
	if err != nil || rec.State != idem.StateCompleted || rec.Attempts != 2 {
		t.Fatalf("step-1's record %+v (%v): want completed by the retaking claim", rec, err)
	}
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) {
		t.Fatalf("queue %+v, want empty", st)
	}
}
