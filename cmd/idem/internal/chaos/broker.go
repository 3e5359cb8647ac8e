package chaos

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
)

// bus is one pass's broker side in the supervisor: the work and
// dead-letter destinations it made, the producer, the progress and the
// dead letters the verdict reads.
type bus interface {
	// names fills the consumers' Source, Durable, DLQ and Counts.
	names(cc *childConfig)
	// produce publishes the plan, keeping at most a window of messages
	// ahead of the settled count, and retries every publish the broker
	// does not acknowledge (when the ack is what was lost, the order is in
	// the broker twice: a producer retry of the real kind).
	produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error
	// progress says how many messages are settled and whether none is
	// pending or in flight; ok is false while the broker is away.
	progress(ctx context.Context) (settled int64, idle, ok bool)
	// deliveries is how many deliveries the consumers got.
	deliveries(ctx context.Context) int
	deadLetters(ctx context.Context) ([]deadLetter, error)
	// close removes what the pass made on a shared broker.
	close()
}

// lostExplainer is a bus that can say more about lost orders (NATS: the
// stream sequence, and whether the broker gave up on the message).
type lostExplainer interface {
	explainLost(ctx context.Context, ids map[string]bool) ([]string, error)
}

// drainer is a bus that cannot see deliveries in flight at live
// consumers (RabbitMQ counts only the ready messages): once progress says
// idle, the supervisor stops every consumer and asks it again.
type drainer interface {
	idleWithoutConsumers(ctx context.Context) (bool, error)
}

// window is how far the producer runs ahead of the settled messages, so
// that the broker restarts hit the producer too.
const window = 400

// waitWindow blocks while message i is more than window ahead.
func waitWindow(ctx context.Context, i int, settled *atomic.Int64) error {
	for int64(i)-settled.Load() > window {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// produceBatches publishes the plan in batches of batch messages, each
// once the window allows it, and sends again the messages of a batch that
// send says failed (those whose acknowledgement was lost are in the broker
// twice: a producer retry of the real kind).
func produceBatches(ctx context.Context, plan *Plan, settled *atomic.Int64, batch int, send func(todo []planned) (failed []planned)) error {
	for i := 0; i < len(plan.Msgs); i += batch {
		if err := waitWindow(ctx, i, settled); err != nil {
			return err
		}
		todo := plan.Msgs[i:min(i+batch, len(plan.Msgs))]
		for len(todo) > 0 {
			todo = send(todo)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if len(todo) > 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	return nil
}

// openBus makes one pass's broker objects.
func openBus(ctx context.Context, cfg Config, e *env, naive bool) (bus, error) {
	switch cfg.Broker {
	case "amqp":
		return openAMQP(ctx, e, cfg.brokerLimit(), naive)
	case "kafka":
		return openKafka(ctx, e, cfg.MaxDeliver, naive) // Kafka has no broker limit
	case "redisstream":
		return openRedisStream(ctx, e, cfg.MaxDeliver, naive) // nor has Redis
	case "mqtt":
		return openMQTT(ctx, cfg, e, cfg.MaxDeliver, naive) // nor has MQTT
	case "sqs":
		return openSQS(ctx, e, cfg.MaxDeliver, naive) // no redrive policy: the consumers' limit only
	case "pubsub":
		return openPubSub(ctx, e, cfg.MaxDeliver, naive) // no dead-letter policy: the consumers' limit only
	case "servicebus":
		return openServiceBus(ctx, e, cfg.brokerLimit(), naive) // MaxDeliveryCount, the consumers' MaxDeliveries to match
	case "eventhubs":
		return openEventHubs(ctx, e, cfg.MaxDeliver, naive) // no broker limit: the consumers' only
	}
	return openNATS(ctx, e, cfg.brokerLimit(), naive)
}

// deliveryCounts sums the counts the consumer processes left in dir: one
// file per process holding its count as 8 bytes.
func deliveryCounts(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	n := 0
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) >= 8 {
			n += int(binary.LittleEndian.Uint64(b))
		}
	}
	return n
}

// counter is a consumer process's delivery count, kept in its own file so
// that it survives the process's SIGKILL (the kernel keeps what was
// written).
type counter struct {
	f *os.File
	n atomic.Uint64
}

func newCounter(dir string) *counter {
	if dir == "" {
		return &counter{}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprint(os.Getpid())))
	if err != nil {
		return &counter{}
	}
	return &counter{f: f}
}

// add counts n more deliveries.
func (c *counter) add(n uint64) { c.write(c.n.Add(n)) }

// atLeast raises the count to n (RabbitMQ numbers the deliveries of a
// channel 1, 2, ...: the highest tag seen is the count).
func (c *counter) atLeast(n uint64) {
	for {
		cur := c.n.Load()
		if n <= cur {
			return
		}
		if c.n.CompareAndSwap(cur, n) {
			c.write(n)
			return
		}
	}
}

func (c *counter) write(n uint64) {
	if c.f == nil {
		return
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	c.f.WriteAt(b[:], 0)
}

// natsBus is a pass on NATS JetStream: a work stream with one durable
// consumer (MaxDeliver the run's delivery limit; the consumers' idem
// MaxDeliveries defaults to it) and a dead-letter stream, made afresh.
type natsBus struct {
	url                                    string
	nc                                     *nats.Conn
	js                                     jetstream.JetStream
	stream, subject, dlqStream, dlqSubject string

	// advisories holds the stream sequences of JetStream's max-deliveries
	// advisories for the durable, as the supervisor heard them (one of
	// idem's passes): what explainLost tells a lost message by.
	advMu      sync.Mutex
	advisories map[uint64]uint64 // stream sequence -> deliveries
}

const durableName = "billing"

func openNATS(ctx context.Context, e *env, maxDeliver int, naive bool) (bus, error) {
	b := &natsBus{url: e.broker.URL(), stream: "CHAOS_ORDERS", subject: "chaos.orders", dlqStream: "CHAOS_DLQ", dlqSubject: "chaos.dlq"}
	if naive {
		b.stream, b.subject, b.dlqStream, b.dlqSubject = "CHAOS_NAIVE", "chaos.naive.orders", "CHAOS_NAIVE_DLQ", "chaos.naive.dlq"
	}
	var err error
	if b.nc, b.js, err = connectNATS(b.url); err != nil {
		return nil, fmt.Errorf("chaos: NATS at %s: %w", b.url, err)
	}
	for _, s := range []jetstream.StreamConfig{
		{Name: b.stream, Subjects: []string{b.subject}, Storage: jetstream.FileStorage},
		{Name: b.dlqStream, Subjects: []string{b.dlqSubject}, Storage: jetstream.FileStorage},
	} {
		_ = b.js.DeleteStream(ctx, s.Name)
		if _, err := b.js.CreateStream(ctx, s); err != nil {
			b.nc.Close()
			return nil, fmt.Errorf("chaos: create stream %s: %w", s.Name, err)
		}
	}
	_, err = b.js.CreateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
		Durable: durableName, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: maxDeliver, MaxAckPending: 512,
	})
	if err != nil {
		b.nc.Close()
		return nil, fmt.Errorf("chaos: create consumer: %w", err)
	}
	if !naive {
		b.advisories = map[uint64]uint64{}
		_, err = b.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+b.stream+"."+durableName, func(m *nats.Msg) {
			var adv struct {
				StreamSeq  uint64 `json:"stream_seq"`
				Deliveries uint64 `json:"deliveries"`
			}
			if json.Unmarshal(m.Data, &adv) == nil {
				b.advMu.Lock()
				b.advisories[adv.StreamSeq] = adv.Deliveries
				b.advMu.Unlock()
			}
		})
		if err != nil {
			b.nc.Close()
			return nil, fmt.Errorf("chaos: subscribe to the max-deliveries advisories: %w", err)
		}
	}
	return b, nil
}

// explainLost says, for each lost order, where it stands in the work
// stream and whether JetStream gave up on it (its max-deliveries
// advisory, heard by the supervisor): an advisory means the consumers
// did not dead-letter a message the broker dropped.
func (b *natsBus) explainLost(ctx context.Context, ids map[string]bool) ([]string, error) {
	s, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		return nil, err
	}
	b.advMu.Lock()
	defer b.advMu.Unlock()
	var notes []string
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("chaos: stream message %d: %w", seq, err)
		}
		id := newDeadLetter(m.Header.Get("Idem-Id"), "", m.Data).id
		if !ids[id] {
			continue
		}
		if n, ok := b.advisories[seq]; ok {
			notes = append(notes, fmt.Sprintf("lost order %s: stream #%d, JetStream gave up on it after %d deliveries (max-deliveries advisory published)", id, seq, n))
		} else {
			notes = append(notes, fmt.Sprintf("lost order %s: stream #%d, no max-deliveries advisory heard", id, seq))
		}
	}
	return notes, nil
}

func (b *natsBus) names(cc *childConfig) {
	cc.Source, cc.Durable, cc.DLQ = b.stream, durableName, b.dlqSubject
}

func (b *natsBus) close() { b.nc.Close() }

func (b *natsBus) consumerInfo(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := b.js.Consumer(ctx, b.stream, durableName)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// progress reads the consumer's pending and unacknowledged counts and the
// stream's last sequence.
func (b *natsBus) progress(ctx context.Context) (int64, bool, bool) {
	info, err := b.consumerInfo(ctx)
	if err != nil {
		return 0, false, false
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := b.js.Stream(sctx, b.stream)
	if err != nil {
		return 0, false, false
	}
	pending, ackPending := int64(info.NumPending), int64(info.NumAckPending)
	idle := pending == 0 && ackPending == 0
	if idle {
		// A message JetStream gave up on is neither pending nor in flight
		// until the consumers handle its kept max-deliveries advisory.
		if as, err := b.js.Stream(sctx, natsidem.DefaultAdvisoryStream+"_"+b.stream+"_"+info.Name); err == nil {
			idle = as.CachedInfo().State.Msgs == 0
		}
	}
	return int64(s.CachedInfo().State.LastSeq) - pending - ackPending, idle, true
}

func (b *natsBus) deliveries(ctx context.Context) int {
	if info, err := b.consumerInfo(ctx); err == nil {
		return int(info.Delivered.Consumer)
	}
	return 0
}

// produce: the messages carry the order id in Idem-Id and no Nats-Msg-Id:
// the stream's duplicate window is off, as on a broker without one, so
// every retry reaches the consumers.
func (b *natsBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	nc, js, err := connectNATS(b.url)
	if err != nil {
		return err
	}
	defer nc.Close()
	for i, m := range plan.Msgs {
		if err := waitWindow(ctx, i, settled); err != nil {
			return err
		}
		msg := nats.NewMsg(b.subject)
		msg.Data = m.Data
		msg.Header.Set("Content-Type", "application/json")
		if m.ID != "" {
			msg.Header.Set("Idem-Id", m.ID)
		}
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := js.PublishMsg(pctx, msg)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (b *natsBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	s, err := b.js.Stream(ctx, b.dlqStream)
	if err != nil {
		return nil, err
	}
	var dls []deadLetter
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("chaos: dead letter %d: %w", seq, err)
		}
		dls = append(dls, newDeadLetter(m.Header.Get("Idem-Id"), m.Header.Get(idem.HeaderReason), m.Data))
	}
	return dls, nil
}

// newDeadLetter reads one dead letter: its id (the key's header, else the
// order in the payload, whole or not) and its reason.
func newDeadLetter(id, reason string, data []byte) deadLetter {
	d := deadLetter{id: id, reason: reason}
	d.decodes = json.Unmarshal(data, &d.order) == nil
	if d.id == "" {
		d.id = d.order.Order
	}
	if d.id == "" {
		var partial struct{ Order string }
		json.Unmarshal(data, &partial)
		d.id = partial.Order
	}
	return d
}
