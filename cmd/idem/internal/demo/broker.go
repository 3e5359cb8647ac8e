package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrBroker means the broker could not be started or reached.
var ErrBroker = errors.New("demo broker")

// broker is a JetStream stream holding the demo's orders and dead letters.
type broker struct {
	name     string // for the report: "embedded NATS JetStream" or the URL
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   string
	orders   string // subject of the orders
	dlq      string // subject of dead letters
	shutdown func()
}

// startBroker starts an embedded nats-server (url "") in a temporary
// directory, or connects to the JetStream server at url, and creates the
// run's stream. close removes everything it created.
func startBroker(ctx context.Context, url, runID string) (b *broker, err error) {
	b = &broker{stream: "IDEM_DEMO_" + runID, orders: "idem.demo." + runID + ".orders", dlq: "idem.demo." + runID + ".dlq"}
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
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
			NoLog: true, NoSigs: true, HTTPPort: 0,
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
		b.name = "embedded NATS JetStream"
	} else {
		b.name = url
	}
	nc, err := nats.Connect(url, nats.Name("idem demo"), nats.Timeout(5*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("%w: cannot connect to %s: %v (is nats-server running? start one with: nats-server -js)", ErrBroker, url, err)
	}
	b.nc = nc
	undo = append(undo, nc.Close)
	if b.js, err = jetstream.New(nc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBroker, err)
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		hint := ""
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			hint = " (start nats-server with -js)"
		}
		return nil, fmt.Errorf("%w: JetStream at %s: %v%s", ErrBroker, url, err, hint)
	}
	// No Nats-Msg-Id is set on publish, so JetStream's own duplicate
	// window never drops the producer's retries: they reach the consumers,
	// which is what the demo is about. The idem key travels in a header.
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
	return b, nil
}

// consumer creates (or returns) the durable pull consumer name on the
// orders subject. Several workers pulling from one durable compete for its
// messages.
func (b *broker) consumer(ctx context.Context, name string, ackWait time.Duration) (jetstream.Consumer, error) {
	c, err := b.js.CreateOrUpdateConsumer(ctx, b.stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
		FilterSubject: b.orders, MaxDeliver: -1, MaxAckPending: 10_000,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: consumer %s: %v", ErrBroker, name, err)
	}
	return c, nil
}

// orderHeader carries the idempotency key: the producer's order id.
const orderHeader = "Idempotency-Key"

// publish publishes one order and returns its stream sequence.
func (b *broker) publish(ctx context.Context, m message) (uint64, error) {
	msg := nats.NewMsg(b.orders)
	msg.Header.Set(orderHeader, m.Order.ID)
	msg.Header.Set("Content-Type", "application/json")
	msg.Data = m.payload()
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return ack.Sequence, nil
}

// deadLetter publishes a copy of a delivery to the dead-letter subject with
// the reason.
func (b *broker) deadLetter(ctx context.Context, m jetstream.Msg, reason string, cause error) error {
	msg := nats.NewMsg(b.dlq)
	for k, v := range m.Headers() {
		msg.Header[k] = v
	}
	msg.Header.Set("Idem-Dead-Letter-Reason", reason)
	msg.Header.Set("Idem-Error", strings.ReplaceAll(cause.Error(), "\n", " "))
	msg.Data = m.Data()
	_, err := b.js.PublishMsg(ctx, msg)
	return err
}

func (b *broker) close() { b.shutdown() }
