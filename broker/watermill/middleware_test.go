package watermillidem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/store/memory"
)

func newMiddleware(t *testing.T, pub message.Publisher, hooks broker.Hooks[*message.Message]) *watermillidem.Middleware {
	t.Helper()
	g, err := idem.New(memory.New(), idem.Options{Scope: "test"})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := watermillidem.New(g, watermillidem.Options{Publisher: pub, PoisonTopic: "poison",
		Backoff: func(int) time.Duration { return time.Millisecond }, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func runRouter(t *testing.T, add func(r *message.Router)) {
	t.Helper()
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	add(r)
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	t.Cleanup(func() { r.Close() })
}

// TestProducedOnce: a handler's produced messages are published once per
// processed message: a duplicate returns none, and a handler that failed
// (its claim released) runs again on the redelivery and produces then.
func TestProducedOnce(t *testing.T) {
	ch := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer ch.Close()
	receipts, err := ch.Subscribe(context.Background(), "receipts")
	if err != nil {
		t.Fatal(err)
	}
	settled := make(chan broker.Report, 10)
	mw := newMiddleware(t, ch, broker.Hooks[*message.Message]{AfterSettle: func(_ context.Context, _ *message.Message, r broker.Report) { settled <- r }})
	var mu sync.Mutex
	runs := map[string]int{}
	runRouter(t, func(r *message.Router) {
		r.AddHandler("billing", "orders", ch, "receipts", ch, func(msg *message.Message) ([]*message.Message, error) {
			mu.Lock()
			runs[msg.UUID]++
			n := runs[msg.UUID]
			mu.Unlock()
			if msg.UUID == "b" && n == 1 {
				return nil, errors.New("downstream briefly unavailable")
			}
			return []*message.Message{message.NewMessage("receipt-"+msg.UUID, nil)}, nil
		}).AddMiddleware(mw.Middleware)
	})
	for _, id := range []string{"a", "b"} {
		if err := ch.Publish("orders", message.NewMessage(id, []byte(id))); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	for range 2 {
		m := <-receipts
		got[m.UUID]++
		m.Ack()
	}
	if err := ch.Publish("orders", message.NewMessage("a", []byte("a"))); err != nil { // a producer's retry
		t.Fatal(err)
	}
	var dup broker.Report
	for r := range settled {
		if r.Result.Outcome == idem.OutcomeDuplicate {
			dup = r
			break
		}
	}
	if string(dup.Result.Record.Result) != "receipt-a" {
		t.Errorf("the duplicate's recorded result %q, want the UUID of what the first run produced", dup.Result.Record.Result)
	}
	select {
	case m := <-receipts:
		t.Fatalf("a duplicate produced %s again", m.UUID)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 1 || runs["b"] != 2 || got["receipt-a"] != 1 || got["receipt-b"] != 1 {
		t.Fatalf("runs %v, receipts %v: want a run once, b twice (its first run failed), one receipt each", runs, got)
	}
}

// TestSharedScopeRefused: one middleware on two handlers of one topic
// would let each skip the other's messages as duplicates; the second
// handler's messages are refused with ErrSharedScope.
func TestSharedScopeRefused(t *testing.T) {
	ch := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer ch.Close()
	mw := newMiddleware(t, ch, broker.Hooks[*message.Message]{})
	ok := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	first, second := mw.Middleware(ok), mw.Middleware(ok)
	var errs [2]error
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	for i, h := range []message.HandlerFunc{first, second} {
		r.AddNoPublisherHandler([]string{"one", "two"}[i], "orders", ch, func(m *message.Message) error {
			_, err := h(m)
			if errs[i] == nil {
				errs[i] = err
				if err == nil {
					errs[i] = errors.New("nil")
				}
				done <- struct{}{}
			}
			return nil
		})
	}
	go func() { _ = r.Run(context.Background()) }()
	<-r.Running()
	defer r.Close()
	if err := ch.Publish("orders", message.NewMessage("x", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	<-done
	<-done
	shared := 0
	for _, err := range errs {
		if errors.Is(err, watermillidem.ErrSharedScope) {
			shared++
		}
	}
	if shared != 1 {
		t.Fatalf("errors %v: want one handler refused with ErrSharedScope", errs)
	}
}

// TestPoisonFieldNames: a dead letter carries Watermill's PoisonQueue
// metadata names, so its tooling reads idem's poison queue too.
func TestPoisonFieldNames(t *testing.T) {
	for got, want := range map[string]string{
		watermillidem.ReasonPoisoned:   middleware.ReasonForPoisonedKey,
		watermillidem.TopicPoisoned:    middleware.PoisonedTopicKey,
		watermillidem.HandlerPoisoned:  middleware.PoisonedHandlerKey,
		watermillidem.SubscriberPoison: middleware.PoisonedSubscriberKey,
	} {
		if got != want {
			t.Errorf("%q, want Watermill's %q", got, want)
		}
	}
}
