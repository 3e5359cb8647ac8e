// Package suite is the brokertest Broker of broker/watermill's tests: the
// middleware on one topic of a Pub/Sub (GoChannel, watermill-sql).
package suite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem/broker/brokertest"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/internal/consumetest"
)

// Broker is the middleware on one topic of a Pub/Sub, as brokertest
// sees it: every consumer Start runs is a router of its own with one
// handler on the topic; dead letters are read from the poison topic.
type Broker struct {
	pub    message.Publisher
	newSub func() (message.Subscriber, error)
	// Crash, when set, cuts a consumer's connection as a crash would
	// (Kill calls it before closing the router): a Pub/Sub whose acks
	// would otherwise still reach the broker.
	Crash    func(sub message.Subscriber)
	features brokertest.Features
	topic    string

	mu       sync.Mutex
	dls      []brokertest.DeadLetter
	raw      []*message.Message // the dead letters as received, for Replay
	replayed int                // how many of raw Replay has replayed
	notDL    error              // what DeadLetterOf said of a message on the poison topic, if it refused one
	down     sync.WaitGroup
}

var topics atomic.Int64

// runID keeps the topics of one test run apart from an earlier run's (a
// durable Pub/Sub keeps them).
var runID = time.Now().Unix()

// NewBroker is the middleware on a topic of its own of pub, each consumer
// subscribing through newSub, with what the Pub/Sub cannot do in f.
func NewBroker(t *testing.T, pub message.Publisher, newSub func() (message.Subscriber, error), f brokertest.Features) *Broker {
	b := &Broker{pub: pub, newSub: newSub, features: f, topic: fmt.Sprintf("orders_%d_%d", runID, topics.Add(1))}
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
			im, err := watermillidem.DeadLetterOf(m)
			b.mu.Lock()
			if err != nil {
				b.notDL = err
			}
			b.dls = append(b.dls, brokertest.DeadLetter{ID: im.ID, Payload: im.Payload, Headers: im.Headers})
			b.raw = append(b.raw, m.Copy())
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

// Topics are the broker's topic and its poison topic.
func (b *Broker) Topics() []string { return []string{b.topic, b.poisonTopic()} }

func (b *Broker) poisonTopic() string { return b.topic + "_poison" }

func (b *Broker) Features() brokertest.Features { return b.features }

// Publish sends each message with watermillidem.Publish (its id in
// Idem-Id, its UUID from the id and the content), one without an id with
// an empty UUID and no Idem-Id.
func (b *Broker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	for _, m := range msgs {
		out := message.NewMessage(m.ID, m.Payload)
		for k, v := range m.Headers {
			out.Metadata[k] = v
		}
		var err error
		if m.ID != "" {
			err = watermillidem.Publish(ctx, b.pub, b.topic, m.ID, out)
		} else {
			err = b.pub.Publish(b.topic, out) // poison: Publish refuses a message without an id
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *Broker) DeadLetters(context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notDL != nil {
		return nil, b.notDL
	}
	return slices.Clone(b.dls), nil
}

// Replay replays, with watermillidem.Replay, the dead letters received and
// not yet replayed.
func (b *Broker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	todo := b.raw[b.replayed:]
	b.replayed = len(b.raw)
	b.mu.Unlock()
	for _, dl := range todo {
		if err := watermillidem.Replay(ctx, b.pub, dl); err != nil {
			return 0, err
		}
	}
	return len(todo), nil
}

// Start runs a router with the middleware on one handler of the topic,
// subscribed before Start returns. Stop and Kill close the router (a
// Pub/Sub whose subscriber dies is closed under it).
func (b *Broker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	mw, err := watermillidem.New(sc.Guard, watermillidem.Options{
		Backoff: consumetest.Backoff(sc), MaxDeliveries: sc.MaxDeliveries,
		Hooks:     consumetest.Hooks(sc.Hooks, watermillidem.MessageOf),
		Publisher: b.pub, PoisonTopic: b.poisonTopic(),
	})
	if err != nil {
		return nil, err
	}
	var h message.HandlerFunc
	if sc.HandleTx != nil {
		h, err = watermillidem.HandleTx(mw, func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
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
	kill := func() {
		if b.Crash != nil {
			b.Crash(sub)
		}
		go closeRouter()
	}
	return consumetest.Start(&b.down, run, func() error { return nil }, kill), nil
}
