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
	opts := servicebus.Options{Backoff: fixed(20 * time.Millisecond), ShutdownTimeout: 100 * time.Millisecond}

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

	// The survivor retakes the crashed holder's claim (chosen: the default
	// would park it for an operator).
	gB, err := servicebus.NewGuard(store, "orders", idem.Options{Lease: lease, Stale: idem.StaleRetake})
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

// sessionQueue creates "orders", session-enabled with the lock lock, on a
// new server and sends it msgs as "<session>/<id>" pairs.
func sessionQueue(t *testing.T, lock time.Duration, msgs ...[2]string) *servicebustest.Server {
	t.Helper()
	srv := newServer(t)
	if err := srv.CreateQueue("orders", servicebustest.QueueOptions{LockDuration: lock, RequiresSession: true}); err != nil {
		t.Fatal(err)
	}
	s, err := newClient(t, srv).NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		session, id := m[0], m[1]
		if err := s.SendMessage(context.Background(), &azservicebus.Message{MessageID: &id, SessionID: &session}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

func sessionGuard(t *testing.T) *idem.Guard {
	t.Helper()
	g, err := servicebus.NewGuard(memory.New(), "orders", idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// An idle session is released: one worker holding session A, which has
// nothing more, lets it go after SessionIdleTimeout and takes B.
func TestSessionIdleReleased(t *testing.T) {
	srv := sessionQueue(t, 2*time.Second, [2]string{"A", "a1"}, [2]string{"B", "b1"})
	seen := make(chan string, 2)
	runSessions(t, srv, sessionGuard(t), servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		seen <- m.MessageID
		return nil, nil
	}), servicebus.Options{Sessions: 1, SessionIdleTimeout: 200 * time.Millisecond})
	for _, want := range []string{"a1", "b1"} {
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("handled %s, want %s", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never handled: the idle session was not released", want)
		}
	}
}

// Options.Sessions sessions are handled at once: A's handler waits for
// B's, which only a second session worker can run.
func TestSessionsAtOnce(t *testing.T) {
	srv := sessionQueue(t, 2*time.Second, [2]string{"A", "a1"}, [2]string{"B", "b1"})
	bDone := make(chan struct{})
	aDone := make(chan struct{})
	runSessions(t, srv, sessionGuard(t), servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		if m.MessageID == "b1" {
			close(bDone)
			return nil, nil
		}
		select {
		case <-bDone:
			close(aDone)
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}), servicebus.Options{Sessions: 2})
	select {
	case <-aDone:
	case <-time.After(30 * time.Second):
		t.Fatal("A's handler never saw B's run: the sessions were not handled at once")
	}
}

// A handler that runs for several session lock durations keeps the
// session (its lock renewed): the message is delivered once, completed,
// and the next one of the session follows.
func TestSessionLockRenewedUnderLongHandler(t *testing.T) {
	const lock = 300 * time.Millisecond
	srv := sessionQueue(t, lock, [2]string{"A", "a1"}, [2]string{"A", "a2"})
	type seen struct {
		id    string
		count uint32
		cause error
	}
	got := make(chan seen, 4)
	settled := make(chan broker.Report, 4)
	runSessions(t, srv, sessionGuard(t), servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		if m.MessageID == "a1" {
			select {
			case <-time.After(5 * lock): // the work
			case <-ctx.Done():
			}
		}
		got <- seen{m.MessageID, m.DeliveryCount, context.Cause(ctx)}
		return nil, ctx.Err()
	}), servicebus.Options{Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
		AfterSettle: func(_ context.Context, m *azservicebus.ReceivedMessage, r broker.Report) { settled <- r },
	}})
	for _, want := range []string{"a1", "a2"} {
		s := <-got
		if s.id != want || s.count != 1 || s.cause != nil {
			t.Fatalf("got %s (delivery %d, cause %v), want %s on its first delivery, uncancelled", s.id, s.count, s.cause, want)
		}
		// Processed and completed under the session's lock, once: a lock
		// run out would bring a1 back (a duplicate) before a2.
		if r := <-settled; r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.BrokerErr != nil {
			t.Fatalf("%s: %s %s, settle error %v; want processed and completed", want, r.Action, r.Result.Outcome, r.BrokerErr)
		}
	}
}

// A session consumer of a subscription (its EntityPath) accepts the
// subscription's sessions.
func TestSessionConsumerOfSubscription(t *testing.T) {
	srv := newServer(t)
	if err := srv.CreateTopic("events", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSubscription("events", "billing", servicebustest.QueueOptions{RequiresSession: true}); err != nil {
		t.Fatal(err)
	}
	s, err := newClient(t, srv).NewSender("events", nil)
	if err != nil {
		t.Fatal(err)
	}
	id, session := "e1", "A"
	if err := s.SendMessage(context.Background(), &azservicebus.Message{MessageID: &id, SessionID: &session}, nil); err != nil {
		t.Fatal(err)
	}
	client := newClient(t, srv)
	entity := servicebus.EntityPath("events", "billing")
	g, err := servicebus.NewGuard(memory.New(), entity, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 1)
	c, err := servicebus.NewSessionConsumer(client, entity, g, servicebus.Handle(func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		seen <- *m.SessionID + "/" + m.MessageID
		return nil, nil
	}), servicebus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case got := <-seen:
		if got != "A/e1" {
			t.Fatalf("handled %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the subscription's session was never handled")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
