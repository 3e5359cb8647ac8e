package demo

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"
)

// ErrBroker means the broker could not be started or reached.
var ErrBroker = errors.New("demo broker")

// ErrBrokerAuth means the broker refused the URL's credentials.
var ErrBrokerAuth = fmt.Errorf("%w: login refused", ErrBroker)

// transport is the broker under the demo: the producer publishes through it
// and each consumer process opens a session on it.
type transport interface {
	// name describes the broker for the report.
	name() string
	// publish sends one order; seq is the producer's sequence number (1, 2,
	// ...), carried with the message so the chaos and the checker can name
	// it whichever broker delivers it.
	publish(ctx context.Context, m message, seq uint64) error
	// open starts a consumer process of the named group ("idem" or
	// "naive"); its sessions compete for the group's messages.
	open(ctx context.Context, group string) (session, error)
	// lostAckCrashes is true when an unacked message stays with its live
	// consumer until the connection ends (AMQP): a lost ack is then only
	// noticed when the consumer dies, so the demo turns it into a crash.
	lostAckCrashes() bool
	close()
}

// session is one consumer process's connection to the broker.
type session interface {
	// fetch yields the deliveries that arrive within a short wait.
	fetch(ctx context.Context) iter.Seq[delivery]
	// close ends the session as a crash would: what it has not acked goes
	// back to the broker for redelivery.
	close()
}

// delivery is one delivery of a message.
type delivery interface {
	seq() uint64  // the producer's sequence number
	data() []byte // the order, as JSON
	key() string  // the idempotency key header
	// ack acknowledges, confirmed by the broker where it can: a settled
	// message is never redelivered.
	ack(ctx context.Context) error
	// retry hands the message back for redelivery after about delay.
	retry(delay time.Duration)
	// deadLetter publishes the message to the dead-letter destination with
	// the reason, then settles the original.
	deadLetter(ctx context.Context, reason string, cause error) error
}

// adapterTransport is a transport whose idem consumers are the broker's
// idem adapter (its consumer receives, runs the guard, settles, and calls
// hooks the demo's chaos and counts hang on) instead of the demo's own loop.
// The naive consumers still open sessions.
type adapterTransport interface {
	// consumeIdem runs one idem consumer process until the chaos crashes
	// it or ctx ends.
	consumeIdem(ctx context.Context, r *runner)
}

// dedupTransport is a transport that may drop messages itself.
type dedupTransport interface {
	// dropsRetries is true when the broker's duplicate detection drops
	// every producer retry (same id, same content) before any consumer
	// sees it, while an id reused with other content gets through.
	dropsRetries() bool
}

// Broker is a broker the demo runs on. cmd/idem's table of broker drivers
// holds one per broker that has a demo; Config.On picks it.
type Broker struct {
	name string
	// url says the demo takes the URL of the user's server (Config.Broker);
	// inProcess that it runs one itself without a URL.
	url, inProcess bool
	start          func(ctx context.Context, cfg Config, runID string) (transport, error)
}

// The brokers the demo runs on.
var (
	// NATS is NATS JetStream: an embedded nats-server, or the server at
	// Config.Broker (nats:// or tls://).
	NATS = &Broker{name: "nats", url: true, inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
		return startNATS(ctx, cfg.Broker, runID, cfg.AckWait)
	}}
	// AMQP is RabbitMQ at Config.Broker (amqp:// or amqps://).
	AMQP = &Broker{name: "amqp", url: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
		return startAMQP(ctx, cfg.Broker, runID)
	}}
	// ServiceBus is an in-process Azure Service Bus
	// (broker/servicebus/servicebustest) through the real azservicebus
	// client: a topic with duplicate detection and a subscription per
	// consumer group, locks of AckWait; idem's consumers are
	// servicebus.NewConsumer, the producer servicebus.Send, and a crash
	// closes the consumer's client.
	ServiceBus = &Broker{name: "servicebus", inProcess: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
		return startServiceBus(ctx, runID, cfg)
	}}
)

// Name is the broker's short name, as --broker takes it.
func (b *Broker) Name() string { return b.name }

// TakesURL says the demo runs on the user's server of this broker, named
// by Config.Broker.
func (b *Broker) TakesURL() bool { return b.url }

// InProcess says the demo runs this broker itself, with no URL.
func (b *Broker) InProcess() bool { return b.inProcess }

// startTransport starts the broker cfg.On names (NATS when nil), at
// cfg.Broker or in process (Config.defaults checked which it takes).
func startTransport(ctx context.Context, cfg Config, runID string) (transport, error) {
	if cfg.On == nil {
		return NATS.start(ctx, cfg, runID)
	}
	return cfg.On.start(ctx, cfg, runID)
}

// seqOf reads the producer's sequence number a message carries (seqHeader);
// 0 when it has none (not one of the demo's).
func seqOf(v string) uint64 {
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}
