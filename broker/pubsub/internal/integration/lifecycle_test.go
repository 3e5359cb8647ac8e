package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	pubsubidem "github.com/idemgo/idem/broker/pubsub"
	"github.com/idemgo/idem/store/memory"
)

// refuseFirstAck is a pstest reactor answering the first Acknowledge as
// Pub/Sub does on an exactly-once subscription for an expired ack id
// (INVALID_ARGUMENT with an ErrorInfo naming the ack id
// PERMANENT_FAILURE_INVALID_ACK_ID), without acking it; later ones pass.
type refuseFirstAck struct{ n atomic.Int32 }

func (r *refuseFirstAck) React(req any) (bool, any, error) {
	ack, ok := req.(*pb.AcknowledgeRequest)
	if !ok || r.n.Add(1) != 1 {
		return false, nil, nil
	}
	md := map[string]string{}
	for _, id := range ack.AckIds {
		md[id] = "PERMANENT_FAILURE_INVALID_ACK_ID"
	}
	st, err := status.New(codes.InvalidArgument, "ack id expired").WithDetails(&errdetails.ErrorInfo{Reason: "EXACTLY_ONCE_ACKID_FAILURE", Metadata: md})
	if err != nil {
		return true, nil, err
	}
	return true, nil, st.Err()
}

// consumer is one consumer of subName on srv, its reports on the
// returned channel, stopped at the test's end.
func consumer(t *testing.T, srv *pstest.Server, settings func(*pubsub.ReceiveSettings), h func(ctx context.Context, m *pubsubidem.Message) ([]byte, error)) <-chan broker.Report {
	t.Helper()
	return consumerOn(t, srv, memory.New(), pubsubidem.Options{}, settings, h)
}

// consumerOn is consumer with its guard on store, and opts (their Hooks
// replaced, their DeadLetter set).
func consumerOn(t *testing.T, srv *pstest.Server, store idem.Store, opts pubsubidem.Options, settings func(*pubsub.ReceiveSettings),
	h func(ctx context.Context, m *pubsubidem.Message) ([]byte, error)) <-chan broker.Report {
	t.Helper()
	cl := newClient(t, srv)
	sub := cl.Subscriber(subName)
	sub.ReceiveSettings.MinDurationPerAckExtension = testDeadline
	sub.ReceiveSettings.MaxDurationPerAckExtension = testDeadline
	if settings != nil {
		settings(&sub.ReceiveSettings)
	}
	g, err := pubsubidem.NewGuard(store, sub, idem.Options{Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan broker.Report, 16)
	dl := cl.Publisher(dlqName)
	opts.Hooks = broker.Hooks[*pubsubidem.Message]{
		AfterSettle: func(_ context.Context, _ *pubsubidem.Message, r broker.Report) { reports <- r },
	}
	opts.DeadLetter = dl
	c, err := pubsubidem.NewConsumer(sub, g, broker.Handle(h), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		dl.Stop()
		cl.Close()
	})
	return reports
}

func publishOne(t *testing.T, cl *pubsub.Client, id string) {
	t.Helper()
	p := cl.Publisher(topicName)
	defer p.Stop()
	if _, err := pubsubidem.Publish(context.Background(), p, id, &pubsub.Message{Data: []byte(id)}).Get(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, reports <-chan broker.Report) broker.Report {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("no report within 60s")
		return broker.Report{}
	}
}

// TestExactlyOnceAckRefused: on an exactly-once subscription, an ack
// Pub/Sub refuses (the ack id expired) is reported as the delivery's
// BrokerErr, the message comes back once its deadline passes, and its
// record makes the redelivery a duplicate: the handler ran once.
func TestExactlyOnceAckRefused(t *testing.T) {
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Acknowledge", Reactor: &refuseFirstAck{}})
	t.Cleanup(func() { srv.Close() })
	admin := newClient(t, srv)
	defer admin.Close()
	setup(t, admin, true, defaultAttempts)
	var calls atomic.Int32
	reports := consumer(t, srv, nil, func(context.Context, *pubsubidem.Message) ([]byte, error) {
		calls.Add(1)
		return []byte("charged"), nil
	})
	publishOne(t, admin, "order-1")

	first := next(t, reports)
	var ack interface{ Unwrap() error }
	if first.Action != idem.ActionAck || first.Result.Outcome != idem.OutcomeProcessed || first.BrokerErr == nil || !errors.As(first.BrokerErr, &ack) {
		t.Fatalf("first delivery: %+v; want processed, its ack refused", first)
	}
	second := next(t, reports)
	if second.Action != idem.ActionAck || second.Result.Outcome != idem.OutcomeDuplicate || second.BrokerErr != nil {
		t.Fatalf("redelivery: %+v; want a duplicate, acked", second)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestMaxExtensionLost: a handler still running when the client stops
// extending its message's deadline (ReceiveSettings.MaxExtension) has its
// context cancelled with cause ErrLockLost, nothing is settled for that
// delivery, and the message, nacked, comes back and is handled.
func TestMaxExtensionLost(t *testing.T) {
	srv := newServer(t)
	admin := newClient(t, srv)
	defer admin.Close()
	setup(t, admin, false, defaultAttempts)
	var calls atomic.Int32
	cause := make(chan error, 1)
	reports := consumer(t, srv, func(s *pubsub.ReceiveSettings) { s.MaxExtension = time.Second },
		func(ctx context.Context, _ *pubsubidem.Message) ([]byte, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil, ctx.Err()
			}
			return []byte("done"), nil
		})
	publishOne(t, admin, "slow-1")

	if err := <-cause; !errors.Is(err, pubsubidem.ErrLockLost) {
		t.Fatalf("handler's context ended with %v; want ErrLockLost", err)
	}
	first := next(t, reports)
	if !errors.Is(first.BrokerErr, pubsubidem.ErrLockLost) {
		t.Fatalf("first delivery: %+v; want its deadline lost", first)
	}
	second := next(t, reports)
	if second.Action != idem.ActionAck || second.Result.Outcome != idem.OutcomeProcessed {
		t.Fatalf("redelivery: %+v; want processed and acked", second)
	}
}
