package watermillidem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// HeaderID is the metadata field whose value, when set, is the message's
// id in place of its UUID (MessageOf).
const HeaderID = "Idem-Id"

// Metadata set on a dead letter beside idem's own (broker.DeadLetterHeaders:
// idem.HeaderReason, idem.HeaderError, idem.HeaderDeadLetterKey,
// idem.HeaderFingerprint and the idem.HeaderStored* fields). The *_poisoned
// fields are those of Watermill's own PoisonQueue middleware, so tooling
// written for its poison queue reads idem's too.
const (
	HeaderTopic      = "Idem-Original-Topic" // the topic the handler subscribed to
	HeaderHandler    = "Idem-Handler"        // the router handler that dead-lettered it
	ReasonPoisoned   = "reason_poisoned"     // the error text (middleware.ReasonForPoisonedKey)
	TopicPoisoned    = "topic_poisoned"      // middleware.PoisonedTopicKey
	HandlerPoisoned  = "handler_poisoned"    // middleware.PoisonedHandlerKey
	SubscriberPoison = "subscriber_poisoned" // middleware.PoisonedSubscriberKey
)

// MessageOf is what the guard reads of msg: ID from the Idem-Id metadata
// field (HeaderID) when set, else the UUID, which the publisher assigns
// and every Pub/Sub keeps across redeliveries; Headers are the metadata
// (not copied); CorrelationID is Watermill's correlation_id field.
func MessageOf(msg *message.Message) idem.Message {
	id := msg.Metadata[HeaderID]
	if id == "" {
		id = msg.UUID
	}
	return idem.Message{ID: id, Headers: msg.Metadata, Payload: msg.Payload,
		ContentType: msg.Metadata["Content-Type"], CorrelationID: msg.Metadata["correlation_id"]}
}

// Options configure a Middleware. Publisher and PoisonTopic are required.
type Options struct {
	// Backoff is how long a failed message waits before it is nacked for a
	// redelivery, from its attempt, and a held message's claim pace
	// (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere is
	// held before it is nacked (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the handler failures, counted in the record, before a
	// max_deliver dead letter (broker.Options). Zero: none.
	MaxDeliveries int
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[*message.Message]

	// Publisher publishes the dead letters to PoisonTopic, and the
	// messages the handler produces to the handler's publish topic: they
	// are published before the record is completed, so a duplicate, which
	// returns none, never lacks them (the router would publish them after
	// the handler returned, and a failed publish would then lose them).
	// Give it the handler's own publisher.
	Publisher message.Publisher
	// PoisonTopic receives conflicts, permanent failures, messages without
	// a usable key, parked records and, with MaxDeliveries, messages that
	// failed that often, with idem's headers in the metadata. It must not
	// be a topic the handler consumes.
	PoisonTopic string
	// Result is what a processed message records, replayed in the Report
	// of its duplicates. Default: the UUIDs of the messages the handler
	// produced, one a line.
	Result func(produced []*message.Message) []byte
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*message.Message], error) {
	e := broker.Options[*message.Message]{
		Backoff:       o.Backoff,
		MaxHold:       o.MaxHold,
		MaxDeliveries: o.MaxDeliveries,
		Hooks:         o.Hooks,
	}
	err := e.Fill()
	o.Backoff, o.MaxHold = e.Backoff, e.MaxHold
	return e, err
}

// Middleware makes Watermill router handlers idempotent on an idem store:
// for each message it claims the key, runs the handler and publishes what
// it produced, completes the record and returns nil (the router acks); a
// duplicate is acked without running the handler and returns no
// messages; a handler error releases the claim and is returned once the
// back-off is waited out (the router nacks, the Pub/Sub redelivers); a
// conflict goes to the poison topic with idem's headers and is acked.
// Each message runs through idem's consumer engine (broker.Processor), so
// holds, store outages and delivery limits behave as on every broker.
type Middleware struct {
	g    *idem.Guard
	opts Options
	eng  broker.Options[*message.Message] // opts' engine options, filled

	mu       sync.Mutex
	handlers map[string]string // topic -> the handler consuming it
}

// New returns the middleware running handlers under g, whose scope is the
// consumer's identity (a name for the handler: the scope and the key are
// the guard's, as on every broker). A middleware added to the whole router
// runs for each handler in g's scope: two handlers of one topic under one
// middleware would skip each other's messages as duplicates, so the second
// one's messages are refused (ErrSharedScope). Everything else is checked
// here: a nil
// guard or publisher, an empty PoisonTopic and negative options are
// refused with an error wrapping idem.ErrInvalidOptions.
func New(g *idem.Guard, opts Options) (*Middleware, error) {
	switch {
	case g == nil:
		return nil, fmt.Errorf("%w: watermillidem: nil guard", idem.ErrInvalidOptions)
	case opts.Publisher == nil:
		return nil, fmt.Errorf("%w: watermillidem: Options.Publisher is required (dead letters, produced messages)", idem.ErrInvalidOptions)
	case opts.PoisonTopic == "":
		return nil, fmt.Errorf("%w: watermillidem: Options.PoisonTopic is required (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	if opts.Result == nil {
		opts.Result = producedUUIDs
	}
	return &Middleware{g: g, opts: opts, eng: eo}, nil
}

// Close does nothing: the middleware keeps no goroutines of its own (earlier
// versions kept some between messages).
//
// Deprecated: there is nothing to close; the call can be removed.
func (m *Middleware) Close() {}

// growStack gives the router's goroutine, fresh for each message and
// started with a small stack, the room the flow needs (the engine, the
// guard, the store, SHA-256) in one growth, while the goroutine's stack
// holds only the router's few frames: growing it step by step as the flow
// goes deeper copies the deeper stack each time, which cost more CPU than
// the flow itself (CockroachDB's growstack does the same).
//
//go:noinline
func growStack() byte {
	var buf [growBy]byte
	buf[stackIndex] = 1 // a variable index: the array is made (noinline: the call stays)
	return buf[stackIndex+1]
}

// growBy is the frame of growStack: with the router's frames, a 16 KB
// stack, the largest size the runtime keeps cached per processor.
const growBy = 12 << 10

// stackIndex is never set: an index the compiler cannot see through.
var stackIndex int

func producedUUIDs(produced []*message.Message) []byte {
	if len(produced) == 0 {
		return nil
	}
	ids := make([]string, len(produced))
	for i, m := range produced {
		ids[i] = m.UUID
	}
	return []byte(strings.Join(ids, "\n"))
}

// RetryError is what the middleware returns for a message to be delivered
// again (the router nacks it): the handler failed, or the key is still in
// progress elsewhere past MaxHold, or the store could not be reached at
// shutdown. It wraps the guard's error (idem.ErrInProgress, the handler's).
type RetryError struct {
	Report broker.Report
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("watermillidem: message to be redelivered (%s): %v", e.Report.Result.Outcome, e.Report.Err)
}

func (e *RetryError) Unwrap() error { return e.Report.Err }

// Middleware wraps h (a message.HandlerMiddleware) in two-phase mode
// (idem.Guard.Do): add it to a handler or to the router.
func (m *Middleware) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return m.wrap(broker.Handle(func(ctx context.Context, msg *message.Message) ([]byte, error) {
		return m.run(ctx, msg, h)
	}))
}

// HandlerTx is a router handler that runs fn inside a transaction of the
// guard's store together with the dedup marker (idem.DoTx, the
// transactional inbox): fn's writes through tx and the marker commit
// together, or neither does; what fn produces is published before the
// commit. The guard's store must implement idem.TxStore[Tx]; one that
// does not is refused with an error wrapping idem.ErrInvalidOptions.
//
// Deprecated: use HandleTx, the name every adapter gives it.
func HandlerTx[Tx any](m *Middleware, fn func(ctx context.Context, tx Tx, msg *message.Message) ([]*message.Message, error)) (message.HandlerFunc, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: watermillidem: nil handler", idem.ErrInvalidOptions)
	}
	h := broker.HandleTx(func(ctx context.Context, tx Tx, msg *message.Message) ([]byte, error) {
		return m.run(ctx, msg, func(msg *message.Message) ([]*message.Message, error) { return fn(msg.Context(), tx, msg) })
	})
	if err := h.Check(m.g); err != nil {
		return nil, err
	}
	return m.wrap(h), nil
}

// run runs h for msg under the claim whose context is ctx and publishes
// what it produced, so that the record completes only once they are out.
func (m *Middleware) run(ctx context.Context, msg *message.Message, h message.HandlerFunc) ([]byte, error) {
	orig := msg.Context()
	msg.SetContext(ctx) // the key (idem.KeyFromContext), cancelled if the claim is lost
	out, err := h(msg)
	msg.SetContext(orig)
	if err != nil {
		return nil, err
	}
	if len(out) > 0 {
		topic := message.PublishTopicFromCtx(orig)
		if topic == "" {
			return nil, message.ErrOutputInNoPublisherHandler
		}
		if err := m.opts.Publisher.Publish(topic, out...); err != nil {
			return nil, fmt.Errorf("watermillidem: publish produced messages to %s: %w", topic, err)
		}
	}
	return m.opts.Result(out), nil
}

// ErrSharedScope is returned for the messages of a second router handler
// subscribed to a topic that another handler consumes under the same
// middleware: both would record the same keys in one scope, and each
// would skip what the other did as a duplicate. Give each handler a
// middleware with a guard of its own scope.
var ErrSharedScope = errors.New("watermillidem: two handlers of one topic share a middleware (and so a scope)")

// register records that the handler of ctx consumes its topic under m,
// refusing a second handler of the same topic (ErrSharedScope).
func (m *Middleware) register(ctx context.Context) error {
	topic, name := message.SubscribeTopicFromCtx(ctx), message.HandlerNameFromCtx(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.handlers == nil {
		m.handlers = map[string]string{}
	}
	if other, ok := m.handlers[topic]; ok && other != name {
		return fmt.Errorf("%w: handlers %q and %q of topic %q in scope %q", ErrSharedScope, other, name, topic, m.g.Options().Scope)
	}
	m.handlers[topic] = name
	return nil
}

// wrap is the router handler running h on the engine's processor, built
// on the first message (which names the handler and its topic).
func (m *Middleware) wrap(h broker.Handler[*message.Message]) message.HandlerFunc {
	var (
		once sync.Once
		proc *broker.Processor[*message.Message]
		err  error
	)
	return func(msg *message.Message) ([]*message.Message, error) {
		// Before any frame of the flow is on the stack (this one is
		// small): see growStack.
		growStack()
		once.Do(func() {
			if err = m.register(msg.Context()); err == nil {
				proc, err = broker.NewProcessor[*message.Message](transport{m}, m.g, h, m.eng)
			}
		})
		if err != nil {
			return nil, err
		}
		return process(proc, msg)
	}
}

// process runs msg through proc on the router's goroutine, one per message
// already: a hop to another goroutine and back would make every message
// wait on two wake-ups. No stop channel: a hold ends with the message's
// context, which is asked for its Done channel only when a delivery is
// held (the channel is made on first use).
func process(proc *broker.Processor[*message.Message], msg *message.Message) ([]*message.Message, error) {
	r := proc.ProcessUntil(msg.Context(), nil, msg)
	switch {
	case r.Action == idem.ActionAck, r.Action == idem.ActionDeadLetter && r.BrokerErr == nil:
		return nil, nil
	case r.BrokerErr != nil:
		return nil, r.BrokerErr
	}
	return nil, &RetryError{Report: r}
}

// transport settles the router's messages for the engine's processor.
// The router schedules messages (a handler call each) and acks or nacks
// each from what the middleware returns, so Ack and Retry settle nothing
// themselves; the engine waits the back-off out (a nack is redelivered at
// once: Delayer false) before the middleware returns the error. Watermill
// counts no deliveries: the handler's failures are counted in the record.
type transport struct{ m *Middleware }

func (transport) Message(msg *message.Message) idem.Message { return MessageOf(msg) }

func (transport) Delivery(*message.Message) broker.Delivery { return broker.Delivery{Attempt: 1} }

func (transport) Ack(context.Context, *message.Message) error { return nil }

// Retry settles nothing: the middleware returns the error and the router
// nacks, which Watermill redelivers at once, so the engine waits the
// back-off out before (RetryDelays false), until the message's context ends.
func (transport) Retry(context.Context, *message.Message, time.Duration) error { return nil }

// RetryDelays: a nack cannot delay (broker.Delayer).
func (transport) RetryDelays() bool { return false }

// SettlesInPlace: the router acks and nacks (broker.InPlace).
func (transport) SettlesInPlace() bool { return true }

// DeadLetter publishes a copy of msg, with idem's headers and where it came
// from in the metadata, to the poison topic.
func (t transport) DeadLetter(_ context.Context, msg *message.Message, d broker.DeadLetter) error {
	dl := DeadLetter(msg, d.Headers)
	if err := t.m.opts.Publisher.Publish(t.m.opts.PoisonTopic, dl); err != nil {
		return fmt.Errorf("watermillidem: publish dead letter to %s: %w", t.m.opts.PoisonTopic, err)
	}
	return nil
}

// DeadLetter is the dead letter of msg with idem's headers h: the same UUID
// and payload, the original metadata, h, the subscribed topic and the
// handler (also under the names Watermill's PoisonQueue middleware uses).
func DeadLetter(msg *message.Message, h map[string]string) *message.Message {
	dl := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		dl.Metadata[k] = v
	}
	for k, v := range h {
		dl.Metadata[k] = v
	}
	ctx := msg.Context()
	topic, handler := message.SubscribeTopicFromCtx(ctx), message.HandlerNameFromCtx(ctx)
	dl.Metadata[HeaderTopic], dl.Metadata[TopicPoisoned] = topic, topic
	dl.Metadata[HeaderHandler], dl.Metadata[HandlerPoisoned] = handler, handler
	dl.Metadata[SubscriberPoison] = message.SubscriberNameFromCtx(ctx)
	dl.Metadata[ReasonPoisoned] = h[idem.HeaderReason] + ": " + h[idem.HeaderError]
	return dl
}
