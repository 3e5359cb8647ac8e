package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/broker/brokertest"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
)

// TestConformance runs broker/brokertest on the JetStream server: each
// subtest gets a stream of its own, its dead-letter stream and one durable
// consumer, which every consumer the case starts shares (each on its own
// connection).
func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newSuiteBroker(t) })
}

// suiteAckWait is the durable consumer's AckWait: how long a message
// whose consumer crashed waits before it is redelivered.
const suiteAckWait = 2 * time.Second

// suiteBroker is the adapter on one stream, as brokertest sees it.
type suiteBroker struct {
	e *env
	// dial connects a consumer Start runs (nil: to the env's server).
	dial func() (*nats.Conn, error)
	mu   sync.Mutex
	dls  []brokertest.DeadLetter
	next uint64 // next dead-letter stream sequence to read
	// replayTo is the first dead-letter stream sequence Replay has not
	// replayed.
	replayTo uint64
	down     sync.WaitGroup // consumers winding down after Stop or Kill
}

func newSuiteBroker(t *testing.T) *suiteBroker { return newSuiteBrokerOn(t, newEnv(t)) }

func newSuiteBrokerOn(t *testing.T, e *env) *suiteBroker {
	b := &suiteBroker{e: e, next: 1}
	t.Cleanup(b.down.Wait) // before newEnv's cleanup deletes the streams
	return b
}

// Features: JetStream counts deliveries toward the consumer's MaxDeliver,
// which Start sets from MaxDeliveries. It keeps no order the adapter
// preserves: a retried message is nak'ed and redelivered after the ones
// behind it, and Concurrency handlers run at once.
func (b *suiteBroker) Features() brokertest.Features {
	return brokertest.Features{DeliveryLimit: true, Redelivery: suiteAckWait}
}

// Publish sends each message with its id in Idem-Id only, as MessageOf
// reads it: without Nats-Msg-Id the stream deduplicates nothing, and the
// suite's producer retries are all stored.
func (b *suiteBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	out := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		out[i] = b.natsMsg(m)
	}
	_, err := b.send(ctx, out)
	return err
}

// natsMsg is m as Publish sends it.
func (b *suiteBroker) natsMsg(m brokertest.Message) *nats.Msg {
	msg := nats.NewMsg(b.e.subject + ".orders")
	if m.OrderKey != "" {
		msg.Subject = b.e.subject + ".key." + m.OrderKey
	}
	msg.Data = m.Payload
	for k, v := range m.Headers {
		msg.Header.Set(k, v)
	}
	if m.ID != "" {
		msg.Header.Set(natsidem.HeaderID, m.ID)
	}
	return msg
}

// send publishes msgs asynchronously and waits for every ack. It returns
// the messages whose publish failed, with the last failure.
func (b *suiteBroker) send(ctx context.Context, msgs []*nats.Msg) (failed []*nats.Msg, err error) {
	acks := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, perr := b.e.js.PublishMsgAsync(m)
		if perr != nil {
			failed, err = append(failed, m), perr
			continue
		}
		acks = append(acks, f)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case perr := <-f.Err():
			failed, err = append(failed, f.Msg()), perr
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return failed, err
}

// suiteDuplicates is the duplicate window of the stream PublishDeduplicated
// publishes to: JetStream's default, far longer than a case.
const suiteDuplicates = 2 * time.Minute

// PublishDeduplicated sends each message with natsidem.Publish (Idem-Id
// the id, Nats-Msg-Id its idem.DedupID) after giving the stream a
// two-minute duplicate window.
func (b *suiteBroker) PublishDeduplicated(ctx context.Context, msgs ...brokertest.Message) error {
	s, err := b.e.js.Stream(ctx, b.e.stream)
	if err != nil {
		return err
	}
	cfg := s.CachedInfo().Config
	if cfg.Duplicates != suiteDuplicates {
		cfg.Duplicates = suiteDuplicates
		if _, err := b.e.js.UpdateStream(ctx, cfg); err != nil {
			return err
		}
	}
	for _, m := range msgs {
		nm := b.natsMsg(m)
		var opts []natsidem.PublishOption
		for k, v := range m.Headers {
			opts = append(opts, natsidem.WithHeader(k, v))
		}
		if _, err := natsidem.Publish(ctx, b.e.js, nm.Subject, m.ID, m.Payload, opts...); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetters reads the dead-letter stream up to its last message.
func (b *suiteBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.e.js.Stream(ctx, b.e.stream+"_DLQ")
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	for ; info.State.Msgs > 0 && b.next <= info.State.LastSeq; b.next++ {
		raw, err := s.GetMsg(ctx, b.next)
		if err != nil {
			return nil, fmt.Errorf("dead letter %d: %w", b.next, err)
		}
		h := map[string]string{}
		for k, v := range raw.Header {
			if len(v) > 0 {
				h[k] = v[0]
			}
		}
		id := raw.Header.Get(natsidem.HeaderID)
		if id == "" {
			id = raw.Header.Get(natsidem.HeaderOriginalPrefix + jetstream.MsgIDHeader)
		}
		b.dls = append(b.dls, brokertest.DeadLetter{ID: id, Payload: raw.Data, Headers: h})
	}
	return slices.Clone(b.dls), nil
}

// Replay re-publishes, with natsidem.Replay, every dead letter
// DeadLetters has read and Replay has not replayed, reading them back from
// the dead-letter stream with an ordered consumer.
func (b *suiteBroker) Replay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.replayTo = max(b.replayTo, 1)
	if b.replayTo >= b.next {
		return 0, nil
	}
	s, err := b.e.js.Stream(ctx, b.e.stream+"_DLQ")
	if err != nil {
		return 0, err
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: b.replayTo,
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for b.replayTo < b.next {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			return n, fmt.Errorf("dead letter %d: %w", b.replayTo, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return n, err
		}
		if md.Sequence.Stream >= b.next {
			break
		}
		if err := natsidem.Replay(ctx, b.e.js, m); err != nil {
			return n, err
		}
		b.replayTo = md.Sequence.Stream + 1
		n++
	}
	return n, nil
}

// Start runs a consumer on a connection of its own, on the case's durable
// consumer, whose MaxDeliver is MaxDeliveries (unlimited for 0). Kill
// closes the connection: JetStream redelivers what it had not acked after
// AckWait.
func (b *suiteBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	dial := b.dial
	if dial == nil {
		dial = func() (*nats.Conn, error) { return nats.Connect(b.e.nc.ConnectedUrl(), nats.Name("brokertest")) }
	}
	nc, err := dial()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	maxDeliver := -1
	if sc.MaxDeliveries > 0 {
		maxDeliver = sc.MaxDeliveries
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, b.e.stream, jetstream.ConsumerConfig{
		Durable: "suite", AckPolicy: jetstream.AckExplicitPolicy, AckWait: suiteAckWait, MaxDeliver: maxDeliver,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	c, err := natsidem.NewConsumer(cons, sc.Guard, consumetest.SuiteHandler(sc, natsidem.MessageOf), natsidem.Options{Concurrency: sc.Concurrency, Backoff: consumetest.Backoff(sc), Hooks: consumetest.Hooks(sc.Hooks, natsidem.MessageOf), JetStream: js, DeadLetterSubject: b.e.dlq})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return consumetest.Start(&b.down, c.Run,
		func() error { // the acks reach the server before the connection closes
			defer nc.Close()
			return nc.Flush()
		},
		nc.Close), nil
}
