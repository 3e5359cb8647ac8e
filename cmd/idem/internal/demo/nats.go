package demo

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// natsBroker is a JetStream stream holding the run's orders and dead
// letters, on an embedded nats-server or a real one.
type natsBroker struct {
	label    string
	js       jetstream.JetStream
	stream   string
	orders   string // subject of the orders
	dlq      string // subject of dead letters
	ackWait  time.Duration
	shutdown func()
}

// seqHeader carries the producer's sequence number.
const seqHeader = "Demo-Seq"

// orderHeader carries the idempotency key: the producer's order id.
const orderHeader = "Idempotency-Key"

// startNATS starts an embedded nats-server (url "") in a temporary
// directory, or connects to the JetStream server at url, and creates the
// run's stream and its two durable consumers. close removes everything it
// created.
func startNATS(ctx context.Context, url, runID string, ackWait time.Duration) (_ *natsBroker, err error) {
	// b is not the named result: a failed start returns nil, and the
	// deferred shutdown below must still reach what it started.
	b := &natsBroker{stream: "IDEM_DEMO_" + runID, orders: "idem.demo." + runID + ".orders",
		dlq: "idem.demo." + runID + ".dlq", ackWait: ackWait}
	var undo []func()
	b.shutdown = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			b.shutdown()
		}
	}()
	if url == "" {
		dir, err := os.MkdirTemp("", "idem-demo-nats-")
		if err != nil {
			return nil, fmt.Errorf("%w: temporary directory: %v", ErrBroker, err)
		}
		undo = append(undo, func() { os.RemoveAll(dir) })
		ns, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: embedded nats-server: %v", ErrBroker, err)
		}
		ns.Start()
		undo = append(undo, func() { ns.Shutdown(); ns.WaitForShutdown() })
		if !ns.ReadyForConnections(10 * time.Second) {
			return nil, fmt.Errorf("%w: the embedded nats-server did not start within 10s", ErrBroker)
		}
		url = ns.ClientURL()
		b.label = "embedded NATS JetStream"
	} else {
		b.label = dsn.Redact(url)
	}
	nc, err := nats.Connect(url, nats.Name("idem demo"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, natsConnectErr(b.label, err)
	}
	undo = append(undo, nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		hint := ""
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			hint = " (start nats-server with -js)"
		}
		return nil, fmt.Errorf("%w: JetStream at %s: %v%s", ErrBroker, b.label, err, hint)
	}
	// No Nats-Msg-Id is set on publish, so JetStream's own duplicate window
	// never drops the producer's retries: they reach the consumers, which is
	// what the demo is about. The idem key travels in a header.
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: b.stream, Subjects: []string{b.orders, b.dlq}, Storage: jetstream.FileStorage,
		MaxAge: time.Hour, Description: "idem demo run " + runID,
	}); err != nil {
		return nil, fmt.Errorf("%w: create stream %s: %v", ErrBroker, b.stream, err)
	}
	undo = append(undo, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.js.DeleteStream(dctx, b.stream)
	})
	for _, group := range []string{"idem", "naive"} {
		if _, err := b.js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
			Durable: group, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
			FilterSubject: b.orders, MaxDeliver: -1, MaxAckPending: 10_000,
		}); err != nil {
			return nil, fmt.Errorf("%w: consumer %s: %v", ErrBroker, group, err)
		}
	}
	return b, nil
}

// natsConnectErr says why the demo could not connect to the NATS server at
// label: a refused login is not a server that is down.
func natsConnectErr(label string, err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return fmt.Errorf("%w: NATS at %s: %v (check the user and password, or token, in the URL)",
			ErrBrokerAuth, label, err)
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: no NATS server answers at %s: %v (is it running and the address right? start one with: nats-server -js)",
			ErrBroker, label, err)
	}
	return fmt.Errorf("%w: cannot connect to %s: %v", ErrBroker, label, err)
}

func (b *natsBroker) name() string         { return b.label }
func (b *natsBroker) lostAckCrashes() bool { return false }
func (b *natsBroker) close()               { b.shutdown() }

func (b *natsBroker) publish(ctx context.Context, m message, seq uint64) error {
	msg := nats.NewMsg(b.orders)
	msg.Header.Set(orderHeader, m.Order.ID)
	msg.Header.Set(seqHeader, strconv.FormatUint(seq, 10))
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = m.payload()
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

// open binds to the group's durable pull consumer: sessions pulling from
// one durable compete for its messages.
func (b *natsBroker) open(ctx context.Context, group string) (session, error) {
	c, err := b.js.Consumer(ctx, b.stream, group)
	if err != nil {
		return nil, err
	}
	return &natsSession{b: b, c: c}, nil
}

type natsSession struct {
	b *natsBroker
	c jetstream.Consumer
}

// fetch pulls a batch; messages it yields but nobody acks come back after
// the ack wait, as a dead process's would.
func (s *natsSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		batch, err := s.c.Fetch(16, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			sleep(ctx, 50*time.Millisecond)
			return
		}
		stopped := false
		for m := range batch.Messages() {
			if stopped {
				continue // drain the batch; the rest is redelivered after the ack wait
			}
			seq, _ := strconv.ParseUint(m.Headers().Get(seqHeader), 10, 64)
			if !yield(&natsDelivery{b: s.b, m: m, sq: seq}) {
				stopped = true
			}
		}
	}
}

func (s *natsSession) close() {}

type natsDelivery struct {
	b  *natsBroker
	m  jetstream.Msg
	sq uint64
}

func (d *natsDelivery) seq() uint64  { return d.sq }
func (d *natsDelivery) data() []byte { return d.m.Data() }
func (d *natsDelivery) key() string  { return d.m.Headers().Get(orderHeader) }

func (d *natsDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.m.DoubleAck(ctx)
}

func (d *natsDelivery) retry(delay time.Duration) { _ = d.m.NakWithDelay(delay) }

func (d *natsDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	msg := nats.NewMsg(d.b.dlq)
	for k, v := range d.m.Headers() {
		msg.Header[k] = v
	}
	msg.Header.Set("Idem-Dead-Letter-Reason", reason)
	msg.Header.Set("Idem-Error", strings.ReplaceAll(cause.Error(), "\n", " "))
	msg.Data = d.m.Data()
	if _, err := d.b.js.PublishMsg(ctx, msg); err != nil {
		return err
	}
	return d.m.Term()
}
