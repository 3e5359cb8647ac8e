package mqttidem

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// User properties MessageOf reads, and those a dead letter carries beside
// idem's own (broker.DeadLetterHeaders: idem.HeaderReason,
// idem.HeaderError, idem.HeaderDeadLetterKey, idem.HeaderFingerprint and
// the idem.HeaderStored* properties).
const (
	PropertyID = "idem-id" // the producer's message id
	// PropertyTopic is the original message's topic on a dead letter.
	PropertyTopic = "Idem-Original-Topic"
	// PropertyClientID is the session that dead-lettered it.
	PropertyClientID = "Idem-Client-Id"
)

// Message is one QoS 1 delivery to this consumer's session.
type Message struct {
	*paho.Publish
	// Attempt counts this process's tries of the delivery: 1, then one more
	// for each retry made in place. The broker keeps no count.
	Attempt int
	conn    *paho.Client // the connection it arrived on: its PUBACK must go there
}

// MessageOf is what the guard reads of a delivery: ID from the idem-id
// user property (empty without one: give the guard a Key that reads the
// payload then), the payload, the content type, and the other user
// properties as Headers. The packet id is never the message's: it names a
// slot of the session, reused once acked.
func MessageOf(m *Message) idem.Message {
	im := idem.Message{Payload: m.Payload}
	if p := m.Properties; p != nil {
		im.ContentType = p.ContentType
		im.Headers = make(map[string]string, len(p.User))
		for _, u := range p.User {
			if u.Key == PropertyID {
				im.ID = u.Value
				continue
			}
			im.Headers[u.Key] = u.Value
		}
	}
	return im
}

// Options configure a Consumer. Server, ClientID, Topic and
// DeadLetterTopic are required.
type Options struct {
	// Concurrency is how many messages are handled at once, at most
	// ReceiveMaximum (broker.Options). Default 1.
	Concurrency int
	// Backoff is a retry's delay, waited out in this process, and a held
	// message's claim pace (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere is
	// held (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the handler failures before a max_deliver dead letter,
	// counted in the record in two-phase mode: MQTT keeps no delivery count
	// (broker.Options).
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[*Message]

	Server   string // the broker's URL: mqtt://host:1883, mqtts://host:8883, ws://...
	ClientID string // the persistent session's id: the same on every restart, unique per process
	// Topic is the topic filter subscribed at QoS 1, "$share/group/filter"
	// for consumers sharing the messages.
	Topic string
	// DeadLetterTopic receives conflicts, permanent failures, messages
	// without a usable key, parked records and messages that failed
	// MaxDeliveries times, at QoS 1 with their user properties and idem's.
	DeadLetterTopic string
	// SessionExpiry is how long the broker keeps the session (its
	// subscription and unacked messages) while this consumer is
	// disconnected. Default 24h.
	SessionExpiry time.Duration
	// ReceiveMaximum is how many unacked messages the broker may have in
	// flight to this session, and so how many this process may queue.
	// Default 65535, MQTT's own. Lower bounds memory, but on some brokers
	// (mochi-mqtt) a session at its quota gets nothing more until it
	// reconnects, even once acks free the quota.
	ReceiveMaximum uint16
	// Config, when set, adjusts the client's configuration before it
	// connects (TLS, credentials, reconnect back-off, loggers).
	Config func(*autopaho.ClientConfig)
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*Message], error) {
	e := broker.Options[*Message]{
		Concurrency:     o.Concurrency,
		Backoff:         o.Backoff,
		MaxHold:         o.MaxHold,
		MaxDeliveries:   o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout,
		Hooks:           o.Hooks,
	}
	err := e.Fill()
	o.Concurrency, o.Backoff, o.MaxHold, o.ShutdownTimeout = e.Concurrency, e.Backoff, e.MaxHold, e.ShutdownTimeout
	return e, err
}

// Defaults of Options.
const (
	DefaultSessionExpiry  = 24 * time.Hour
	DefaultReceiveMaximum = 65535
)

// ackFlush is how often paho sends the PUBACKs Ack has released, in the
// order of their PUBLISHes.
const ackFlush = 20 * time.Millisecond

// Handler is the work a Consumer runs for each message: Handle
// (two-phase) or HandleTx (transactional inbox).
type Handler = broker.Handler[*Message]

// Consumer runs a Handler for the QoS 1 messages of a topic filter
// delivered to a persistent MQTT v5 session, on idem's consumer engine
// (broker.Consumer).
type Consumer struct {
	t   *transport
	eng *broker.Consumer[*Message]
	cfg autopaho.ClientConfig
}

// NewConsumer returns a consumer of opts.Topic running h under g.
// Everything is checked here: a nil guard or handler, a missing or
// unparsable Server, a missing ClientID, Topic or DeadLetterTopic, a
// dead-letter topic the filter matches, Concurrency above ReceiveMaximum
// and negative options are refused with an error wrapping
// idem.ErrInvalidOptions.
func NewConsumer(g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if opts.SessionExpiry == 0 {
		opts.SessionExpiry = DefaultSessionExpiry
	}
	if opts.ReceiveMaximum == 0 {
		opts.ReceiveMaximum = DefaultReceiveMaximum
	}
	u, err := url.Parse(opts.Server)
	switch {
	case opts.Server == "" || err != nil:
		return nil, fmt.Errorf("%w: mqtt: Options.Server %q is not a URL", idem.ErrInvalidOptions, opts.Server)
	case opts.ClientID == "" || opts.Topic == "":
		return nil, fmt.Errorf("%w: mqtt: Options.ClientID and Topic are required", idem.ErrInvalidOptions)
	case opts.DeadLetterTopic == "" || matches(opts.Topic, opts.DeadLetterTopic):
		return nil, fmt.Errorf("%w: mqtt: Options.DeadLetterTopic is required and not matched by Topic (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	case opts.SessionExpiry < time.Second || opts.SessionExpiry.Seconds() > 0xFFFFFFFE:
		return nil, fmt.Errorf("%w: mqtt: SessionExpiry %v is not between 1s and 136 years", idem.ErrInvalidOptions, opts.SessionExpiry)
	case opts.Concurrency > int(opts.ReceiveMaximum):
		return nil, fmt.Errorf("%w: mqtt: Concurrency %d above ReceiveMaximum %d (handlers would wait for messages the broker will not send)", idem.ErrInvalidOptions, opts.Concurrency, opts.ReceiveMaximum)
	}
	t := &transport{opts: opts, ready: make(chan struct{}, 1), subOK: make(chan struct{})}
	c := &Consumer{t: t}
	c.cfg = autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(opts.SessionExpiry / time.Second),
		ReconnectBackoff:              autopaho.NewConstantBackoff(time.Second),
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			rm := opts.ReceiveMaximum
			cp.Properties.ReceiveMaximum = &rm
			// paho sends "request problem information" as false unless set,
			// and some brokers (mochi-mqtt) then strip user properties, the
			// key among them, from the PUBLISHes they send.
			cp.Properties.RequestProblemInfo = true
			return cp, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			go t.subscribe(cm)
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   opts.ClientID,
			EnableManualAcknowledgment: true,
			SendAcksInterval:           ackFlush,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){t.received},
		},
	}
	if opts.Config != nil {
		opts.Config(&c.cfg)
	}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	c.eng, err = broker.NewConsumer[*Message](t, g, h, eo)
	if err != nil {
		return nil, err
	}
	t.onError = c.eng.ReportError
	return c, nil
}

// matches reports whether the topic filter f (a shared one's filter
// included) matches topic.
func matches(f, topic string) bool {
	if rest, ok := strings.CutPrefix(f, "$share/"); ok {
		if _, f, ok = strings.Cut(rest, "/"); !ok {
			return false
		}
	}
	fs, ts := strings.Split(f, "/"), strings.Split(topic, "/")
	for i, p := range fs {
		switch {
		case p == "#":
			return true
		case i >= len(ts):
			return false
		case p != "+" && p != ts[i]:
			return false
		}
	}
	return len(fs) == len(ts)
}

// Run connects (resuming the session: clean start false), subscribes at
// QoS 1, and handles messages until ctx ends, reconnecting when the
// connection drops; the broker then redelivers what was not acked (dup
// set) and the records decide again. At the end it shuts down gracefully
// (broker.Consumer.Run), lets paho send the PUBACKs released, and
// disconnects, leaving the session to the broker for SessionExpiry.
func (c *Consumer) Run(ctx context.Context) error {
	cm, err := autopaho.NewConnection(context.WithoutCancel(ctx), c.cfg)
	if err != nil {
		return fmt.Errorf("mqtt: connect: %w", err)
	}
	c.t.setConn(cm)
	err = c.eng.Run(ctx)
	flush := time.NewTimer(3 * ackFlush) // paho sends released PUBACKs on its ticker: let it run
	<-flush.C
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if derr := cm.Disconnect(dctx); err == nil && derr != nil && !errors.Is(derr, context.DeadlineExceeded) {
		err = derr
	}
	return err
}

// Subscribed is closed once Run's first subscription is acknowledged:
// from then on the session keeps the topic's messages for this consumer,
// connected or not (for SessionExpiry). Messages published before a
// session's first subscription are not its own.
func (c *Consumer) Subscribed() <-chan struct{} { return c.t.subOK }

// Process handles one message and settles it (for programs that receive
// themselves); Run does the same for every message.
func (c *Consumer) Process(ctx context.Context, m *Message) broker.Report {
	return c.eng.Process(ctx, m)
}

// transport moves the session's deliveries for the engine. paho hands them
// over as they arrive; Retry puts one back in the queue (MQTT has no nack:
// a message left unacked is redelivered only on the next connection).
type transport struct {
	opts    Options
	onError func(error)   // the engine's ReportError
	ready   chan struct{} // a token when queue is not empty
	subOK   chan struct{} // closed at the first SUBACK
	once    sync.Once

	mu    sync.Mutex
	cm    *autopaho.ConnectionManager
	queue []*Message
}

func (t *transport) setConn(cm *autopaho.ConnectionManager) {
	t.mu.Lock()
	t.cm = cm
	t.mu.Unlock()
}

// subscribe (again, on every connection: a session the broker expired has
// lost it) at QoS 1; retained messages only with a new subscription.
func (t *transport) subscribe(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: t.opts.Topic, QoS: 1, RetainHandling: 1}}})
	if err != nil {
		t.onError(fmt.Errorf("mqtt: subscribe %s: %w", t.opts.Topic, err))
		return
	}
	t.once.Do(func() { close(t.subOK) })
}

// received queues a delivery (paho's callback, in arrival order).
func (t *transport) received(pr paho.PublishReceived) (bool, error) {
	if pr.Packet.QoS == 0 {
		return false, nil // nothing to ack: not this consumer's
	}
	t.push(&Message{Publish: pr.Packet, Attempt: 1, conn: pr.Client})
	return true, nil
}

func (t *transport) push(m *Message) {
	t.mu.Lock()
	t.queue = append(t.queue, m)
	t.mu.Unlock()
	t.signal()
}

// signal leaves a token in ready, if none is there.
func (t *transport) signal() {
	select {
	case t.ready <- struct{}{}:
	default:
	}
}

// Receive returns up to n queued deliveries, waiting for one.
func (t *transport) Receive(ctx context.Context, n int) ([]*Message, error) {
	for {
		t.mu.Lock()
		if len(t.queue) > 0 {
			k := min(n, len(t.queue))
			out := append([]*Message(nil), t.queue[:k]...)
			t.queue = t.queue[k:]
			more := len(t.queue) > 0
			t.mu.Unlock()
			if more {
				t.signal() // the token was taken: leave one for the rest
			}
			return out, nil
		}
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.ready:
		}
	}
}

func (t *transport) Message(m *Message) idem.Message { return MessageOf(m) }

// Delivery is this process's count: the broker keeps none and never drops
// a QoS 1 message of a live session, so no delivery is Last.
func (t *transport) Delivery(m *Message) broker.Delivery {
	return broker.Delivery{Attempt: max(m.Attempt, 1)}
}

// errGone: the connection a delivery came on has closed; the broker
// redelivers the message on the next one.
var errGone = errors.New("mqtt: the delivery's connection has closed; the session redelivers it on the next")

// Ack releases the delivery's PUBACK, which paho sends once every earlier
// delivery of the connection is acked too (MQTT orders PUBACKs as the
// PUBLISHes came).
func (t *transport) Ack(_ context.Context, m *Message) error {
	if gone(m) {
		return errGone
	}
	return m.conn.Ack(m.Publish)
}

func gone(m *Message) bool {
	select {
	case <-m.conn.Done():
		return true
	default:
		return false
	}
}

// Retry queues the delivery again, unacked, once the engine has waited out
// the delay (RetryDelays is false): MQTT has no nack, and the broker
// redelivers an unacked message only on the next connection. One whose
// connection has closed is dropped here: the session redelivers it.
func (t *transport) Retry(_ context.Context, m *Message, _ time.Duration) error {
	if !gone(m) {
		t.push(&Message{Publish: m.Publish, Attempt: m.Attempt + 1, conn: m.conn})
	}
	return nil
}

// RetryDelays is false: the engine waits out a retry's delay.
func (t *transport) RetryDelays() bool { return false }

// SettlesInPlace: Ack and Retry take no context.
func (t *transport) SettlesInPlace() bool { return true }

// Return leaves a delivery unacked at shutdown: the session keeps it and
// redelivers it when this ClientID connects again.
func (t *transport) Return(context.Context, *Message) error { return nil }

// Drain takes the queued deliveries at shutdown (returned unacked).
func (t *transport) Drain(context.Context) []*Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.queue
	t.queue = nil
	return out
}

// DeadLetter publishes the message at QoS 1 to DeadLetterTopic, with its
// user properties, idem's headers and its topic, waits for the PUBACK,
// then acks the original.
func (t *transport) DeadLetter(ctx context.Context, m *Message, d broker.DeadLetter) error {
	props := &paho.PublishProperties{}
	if p := m.Properties; p != nil {
		props.ContentType = p.ContentType
		props.User = append(props.User, p.User...)
	}
	for k, v := range d.Headers {
		props.User.Add(k, v)
	}
	props.User.Add(PropertyTopic, m.Topic).Add(PropertyClientID, t.opts.ClientID)
	t.mu.Lock()
	cm := t.cm
	t.mu.Unlock()
	if cm == nil {
		return fmt.Errorf("mqtt: dead letter to %s: not connected", t.opts.DeadLetterTopic)
	}
	if _, err := cm.Publish(ctx, &paho.Publish{QoS: 1, Topic: t.opts.DeadLetterTopic, Payload: m.Payload, Properties: props}); err != nil {
		return fmt.Errorf("mqtt: dead letter to %s: %w", t.opts.DeadLetterTopic, err)
	}
	return t.Ack(ctx, m)
}
