package servicebus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/store/memory"
)

// delivery is what a lock test's handler saw of one delivery.
type delivery struct {
	count uint32 // DeliveryCount
	cause error  // context.Cause of the handler's context when it returned
}

// lockConsumer runs one consumer (Concurrency 1, so a redelivery waits for
// the handler before it) of a new queue holding one message with the lock
// duration lock, renewed every renew, and a back-off of an hour: a
// delivery that waited for it would hold the consumer for the rest of the
// test. handle is the handler; reports get every settlement.
func lockConsumer(t *testing.T, lock, renew time.Duration, handle func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error)) (
	srv *servicebustest.Server, g *idem.Guard, reports <-chan broker.Report, stop func()) {
	t.Helper()
	srv, client, _ := limitQueue(t, servicebustest.QueueOptions{LockDuration: lock})
	g, err := servicebus.NewGuard(memory.New(), servicebus.EntityPath("orders"), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	settled := make(chan broker.Report, 8)
	stopRun := runConsumer(t, client, g, servicebus.Handle(handle), servicebus.Options{
		LockRenewal: renew, Backoff: fixed(time.Hour),
		Hooks: broker.Hooks[*azservicebus.ReceivedMessage]{
			AfterSettle: func(_ context.Context, _ *azservicebus.ReceivedMessage, r broker.Report) { settled <- r },
		}})
	return srv, g, settled, func() {
		if err := stopRun(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestLockLostCancelsHandler: a lock Service Bus reports lost (here the
// first renewal comes after the lock ran out) cancels the handler's
// context with cause ErrLockLost, as a lost lease cancels it with
// idem.ErrLeaseLost. The handler's failure releases the key; the delivery
// spends no back-off and is not settled (its message is available again
// already: the report's BrokerErr is the renewal's lock-lost error), and
// the redelivery, DeliveryCount 2, is processed and completed.
func TestLockLostCancelsHandler(t *testing.T) {
	const lock = 200 * time.Millisecond
	seen := make(chan delivery, 4)
	srv, g, reports, stop := lockConsumer(t, lock, 3*lock, func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		if m.DeliveryCount > 1 {
			seen <- delivery{count: m.DeliveryCount, cause: context.Cause(ctx)}
			return []byte("stored"), nil
		}
		<-ctx.Done() // a handler that outlives its lock, until it is told
		seen <- delivery{count: m.DeliveryCount, cause: context.Cause(ctx)}
		return nil, ctx.Err()
	})
	defer stop()

	first := <-seen
	if first.count != 1 || !errors.Is(first.cause, servicebus.ErrLockLost) {
		t.Fatalf("first delivery (count %d): handler's context ended with %v, want %v", first.count, first.cause, servicebus.ErrLockLost)
	}
	r := <-reports
	if r.Action != idem.ActionRetry || r.Result.Outcome != idem.OutcomeFailed || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("first delivery: %s %s (%v), want a retry of the failed handler", r.Action, r.Result.Outcome, r.Err)
	}
	var sbErr *azservicebus.Error
	if !errors.As(r.BrokerErr, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("first delivery's broker error: %v, want lock lost", r.BrokerErr)
	}

	second := <-seen
	if second.count != 2 || second.cause != nil {
		t.Fatalf("redelivery (count %d): context ended with %v", second.count, second.cause)
	}
	r = <-reports
	if r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.BrokerErr != nil {
		t.Fatalf("redelivery: %s %s (%v), settle %v; want processed and completed", r.Action, r.Result.Outcome, r.Err, r.BrokerErr)
	}
	rec, err := g.Store().Get(context.Background(), idem.Key{Scope: "orders", ID: "order-1"})
	if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "stored" || rec.Attempts != 2 {
		t.Fatalf("record %+v (%v): want completed after 2 claims", rec, err)
	}
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) {
		t.Fatalf("queue %+v, want empty", st)
	}
}

// TestLockRenewedUnderLongHandler: a handler that runs for several lock
// durations keeps its lock (renewed every third of it) and its context:
// the message is delivered once and completed.
func TestLockRenewedUnderLongHandler(t *testing.T) {
	const lock = 200 * time.Millisecond
	seen := make(chan delivery, 4)
	srv, _, reports, stop := lockConsumer(t, lock, 0, func(ctx context.Context, m *azservicebus.ReceivedMessage) ([]byte, error) {
		select {
		case <-time.After(5 * lock): // the work
		case <-ctx.Done():
		}
		seen <- delivery{count: m.DeliveryCount, cause: context.Cause(ctx)}
		return nil, ctx.Err()
	})
	defer stop()
	if d := <-seen; d.count != 1 || d.cause != nil {
		t.Fatalf("delivery %d: context ended with %v", d.count, d.cause)
	}
	if r := <-reports; r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed || r.BrokerErr != nil {
		t.Fatalf("%s %s (%v), settle %v; want processed and completed", r.Action, r.Result.Outcome, r.Err, r.BrokerErr)
	}
	if st, _ := srv.Stats("orders"); st != (servicebustest.Stats{}) {
		t.Fatalf("queue %+v, want empty", st)
	}
}
