package watermillidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemgo/idem/broker/brokertest"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on Watermill's in-process
// GoChannel: each subtest gets a GoChannel of its own.
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker {
		ch := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
		t.Cleanup(func() { ch.Close() })
		return newSuiteBroker(t, ch, func() (message.Subscriber, error) { return keepOpen{ch}, nil }, goChannelFeatures)
	})
}

// keepOpen is a subscriber of a shared GoChannel that a router's Close
// does not close (it would close the GoChannel for every consumer): its
// subscriptions end with their context, which the router cancels.
type keepOpen struct{ message.Subscriber }

func (keepOpen) Close() error { return nil }

// goChannelFeatures: GoChannel hands every message to every subscriber (a
// fan-out, not competing consumers), keeps nothing (a message published
// while no one subscribes, or in flight when a subscriber closes, is
// gone) and counts no deliveries.
var goChannelFeatures = brokertest.Features{Skip: map[string]string{
	"EffectivelyOnce":   "GoChannel fans every message out to every consumer: a reused id reaches each of the case's three consumers and is dead-lettered by each (the PostgreSQL Pub/Sub runs it)",
	"EffectivelyOnceTx": "GoChannel fans every message out to every consumer (the PostgreSQL Pub/Sub runs it)",
	"CrashBeforeSettle": "GoChannel drops a message in flight when its subscriber closes: a crash loses it at the Pub/Sub, before idem",
	"LastDeliveryCrash": "Watermill counts no deliveries",
	"GracefulStopSettlesEverything": "GoChannel discards what its closing subscriber was not yet handed, and gives a later subscriber " +
		"nothing published before it subscribed (the PostgreSQL Pub/Sub runs it)",
	"ConflictDeadLetterHeaders": "a Watermill message carries no broker position (sequence, offset); " +
		"idem's headers on a conflict are checked by DeadLetterHeadersEveryReason",
	"InProgressWaitsForLease": "GoChannel fans the producer's retry out to both consumers, and the one running the first copy takes it only after it (the PostgreSQL Pub/Sub runs it)",
}}

// suiteBroker is the middleware on one topic of a Pub/Sub, as brokertest
// sees it: every consumer Start runs is a router of its own with one
// handler on the topic; dead letters are read from the poison topic.
type suiteBroker struct {
	pub      message.Publisher
	newSub   func() (message.Subscriber, error)
	features brokertest.Features
	topic    string

	mu   sync.Mutex
	dls  []brokertest.DeadLetter
	down sync.WaitGroup
}

var topics atomic.Int64

func newSuiteBroker(t *testing.T, pub message.Publisher, newSub func() (message.Subscriber, error), f brokertest.Features) *suiteBroker {
	b := &suiteBroker{pub: pub, newSub: newSub, features: f, topic: fmt.Sprintf("orders_%d", topics.Add(1))}
	sub, err := newSub()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dls, err := sub.Subscribe(ctx, b.poisonTopic())
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		for m := range dls {
			id := m.Metadata[watermillidem.HeaderID]
			if id == "" {
				id = m.UUID
			}
			b.mu.Lock()
			b.dls = append(b.dls, brokertest.DeadLetter{ID: id, Payload: m.Payload, Headers: m.Metadata})
			b.mu.Unlock()
			m.Ack()
		}
	}()
	t.Cleanup(func() {
		b.down.Wait()
		cancel()
		<-read
	})
	return b
}

func (b *suiteBroker) poisonTopic() string { return b.topic + "_poison" }

func (b *suiteBroker) Features() brokertest.Features { return b.features }

// Publish sends each message with its id as the UUID (a message without
// an id has an empty one).
func (b *suiteBroker) Publish(_ context.Context, msgs ...brokertest.Message) error {
	out := make([]*message.Message, len(msgs))
	for i, m := range msgs {
		out[i] = message.NewMessage(m.ID, m.Payload)
		for k, v := range m.Headers {
			out[i].Metadata[k] = v
		}
	}
	return b.pub.Publish(b.topic, out...)
}

func (b *suiteBroker) DeadLetters(context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dls), nil
}

// Start runs a router with the middleware on one handler of the topic,
// subscribed before Start returns. Stop and Kill close the router (a
// Pub/Sub whose subscriber dies is closed under it).
func (b *suiteBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	mw, err := watermillidem.New(sc.Guard, watermillidem.Options{
		Options: watermillidem.ConsumerOptions{Backoff: consumetest.Backoff(sc), MaxDeliveries: sc.MaxDeliveries,
			Hooks: consumetest.Hooks(sc.Hooks, watermillidem.MessageOf)},
		Publisher: b.pub, PoisonTopic: b.poisonTopic(),
	})
	if err != nil {
		return nil, err
	}
	var h message.HandlerFunc
	if sc.HandleTx != nil {
		h, err = watermillidem.HandlerTx(mw, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
			_, err := sc.HandleTx(ctx, tx, watermillidem.MessageOf(msg))
			return nil, err
		})
		if err != nil {
			return nil, err
		}
	} else {
		h = mw.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			_, err := sc.Handle(msg.Context(), watermillidem.MessageOf(msg))
			return nil, err
		})
	}
	sub, err := b.newSub()
	if err != nil {
		return nil, err
	}
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	handler := r.AddConsumerHandler("suite", b.topic, sub, func(msg *message.Message) error {
		_, err := h(msg)
		return err
	})
	var closeOnce sync.Once
	closeRouter := func() error {
		var err error
		closeOnce.Do(func() { err = r.Close() })
		return err
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	select {
	case <-handler.Started():
	case err := <-done:
		return nil, fmt.Errorf("router: %w", err)
	case <-ctx.Done():
		closeRouter()
		return nil, ctx.Err()
	}
	run := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			if err := closeRouter(); err != nil {
				return err
			}
			return <-done
		case err := <-done:
			return err
		}
	}
	return consumetest.Start(&b.down, run, func() error { return nil }, func() { go closeRouter() }), nil
}
