package outboxenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/servicebus"
	"github.com/idemgo/idem/broker/servicebus/servicebustest"
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
	outboxservicebus "github.com/idemgo/idem/outbox/servicebus"
)

// SBMaxMessageSize is the largest message servicebustest takes (Service
// Bus Standard's 256 KiB is a namespace's; the fake's link says 1 MiB).
const SBMaxMessageSize = 1 << 20

// ServiceBus is one test's in-process Service Bus (servicebustest) and a
// client of it, closed at the end.
type ServiceBus struct {
	Server *servicebustest.Server
	Client *azservicebus.Client
}

// NewServiceBus starts a Service Bus for t.
func NewServiceBus(t testing.TB) *ServiceBus {
	t.Helper()
	srv, err := servicebustest.NewServer()
	if err != nil {
		t.Fatalf("servicebustest: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	client, err := azservicebus.NewClientFromConnectionString(srv.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return &ServiceBus{Server: srv, Client: client}
}

// Queue creates a queue.
func (sb *ServiceBus) Queue(t testing.TB, name string, opts servicebustest.QueueOptions) string {
	t.Helper()
	if err := sb.Server.CreateQueue(name, opts); err != nil {
		t.Fatal(err)
	}
	return name
}

// Received is one message a consumer of a queue got: as
// servicebus.MessageOf builds it, and as Service Bus delivered it.
type Received struct {
	Msg idem.Message
	Raw *azservicebus.ReceivedMessage
}

// Receive returns a function reading queue in delivery order (PeekLock,
// each message completed once read). It asks for one message at a time:
// azservicebus releases the messages that arrive after a ReceiveMessages
// call has what it needs, and a released message comes back behind later
// ones, which would reorder a key the relay published in order.
func (sb *ServiceBus) Receive(t testing.TB, queue string) func(ctx context.Context) (Received, error) {
	t.Helper()
	r, err := sb.Client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	var (
		mu      sync.Mutex
		pending []*azservicebus.ReceivedMessage
	)
	return func(ctx context.Context) (Received, error) {
		mu.Lock()
		defer mu.Unlock()
		for len(pending) == 0 {
			got, err := r.ReceiveMessages(ctx, 1, nil)
			if err != nil {
				return Received{}, err
			}
			pending = got
		}
		m := pending[0]
		pending = pending[1:]
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			return Received{}, fmt.Errorf("complete: %w", err)
		}
		return Received{Msg: servicebus.MessageOf(m), Raw: m}, nil
	}
}

// ServiceBusBroker is outboxtest's broker on a Service Bus queue with
// duplicate detection, through outboxservicebus.
func ServiceBusBroker(t *testing.T) outboxtest.Broker {
	sb := NewServiceBus(t)
	q := sb.Queue(t, "outbox", servicebustest.QueueOptions{RequiresDuplicateDetection: true})
	pub, err := outboxservicebus.New(sb.Client, outboxservicebus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close(context.Background()) })
	receive := sb.Receive(t, q)
	return outboxtest.Broker{
		Publisher:   pub,
		Destination: q,
		Receive: func(ctx context.Context) (idem.Message, error) {
			r, err := receive(ctx)
			return r.Msg, err
		},
		Dedups:    true,
		Schedules: true,
		Rejected:  &outbox.Message{ID: "too-large", Destination: q, Payload: []byte(strings.Repeat("x", SBMaxMessageSize))},
	}
}
