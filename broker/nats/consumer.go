package natsidem

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Options configure a Consumer. JetStream and DeadLetterSubject are
// required; the zero value of every other field is a sensible default. The
// scope and the key are the guard's (idem.Options.Scope, filled by
// NewGuard, and idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
	// Concurrency is how many messages are handled at once (broker.Options).
	// Default 1.
	Concurrency int
	// Backoff is a retry's NakWithDelay delay, from the delivery count, and a
	// held message's claim pace (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds a hold on a key in progress elsewhere, the server told
	// the message is in progress, before the nak with the holder's lease
	// (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the handler failures before a max_deliver dead letter
	// (broker.Options). Default: the consumer's MaxDeliver.
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each message's flow (broker.Options).
	Hooks broker.Hooks[jetstream.Msg]

	// JetStream publishes dead letters (and waits for the stream's ack, so a
	// dead letter is durable before the original is terminated).
	JetStream jetstream.JetStream
	// DeadLetterSubject receives conflicts, permanent failures, messages
	// without a usable key, parked records and messages that would be
	// retried past the consumer's MaxDeliver (reason max_deliver). Bind it
	// to a stream of its own: a dead letter whose publish is not
	// acknowledged is retried, not dropped. A subject the consumer itself
	// consumes (its filter subjects match it) is refused: dead letters
	// would come back to it.
	DeadLetterSubject string
	// Prefetch is how many messages the client buffers ahead of the
	// handlers (PullMaxMessages). Default 2*Concurrency, at least 4 (pulls
	// of one or two messages have been seen to stall until the pull
	// expires). Buffered messages count against the consumer's
	// MaxAckPending, and their AckWait runs while they wait: keep
	// Prefetch/Concurrency times the handler's duration under AckWait.
	Prefetch int
	// AdvisoryStream names the streams that keep JetStream's
	// max-deliveries advisories, one per consumer
	// ("<AdvisoryStream>_<stream>_<consumer>", created when missing, a work
	// queue kept 7 days), so that a message JetStream gives up on while the
	// whole fleet is down is still dead-lettered by the next Run (see the
	// package doc: At the delivery limit). Default DefaultAdvisoryStream;
	// "-": none (a plain subscription: advisories raised while no Run is
	// up are missed).
	AdvisoryStream string
	// DoubleAck acknowledges with DoubleAck, waiting for the server to
	// confirm. A lost plain Ack is harmless (the redelivery is a duplicate
	// acked without running the handler); DoubleAck trades a round trip per
	// message for fewer such redeliveries and ack failures in the Report.
	DoubleAck bool
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[jetstream.Msg], error) {
	e := broker.Options[jetstream.Msg]{
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

// Default back-off bounds and hold (broker.Options).
const (
	DefaultMinBackoff = broker.DefaultMinBackoff
	DefaultMaxBackoff = broker.DefaultMaxBackoff
	DefaultMaxHold    = broker.DefaultMaxHold
)

// ReasonMaxDeliver is broker.ReasonMaxDeliver, the dead-letter reason of a
// message that would be retried on its last allowed delivery (the
// consumer's MaxDeliver), that failed MaxDeliveries times, or that
// JetStream gave up on (its max-deliveries advisory): JetStream would
// otherwise drop it silently.
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// pullExpiry bounds each pull request. Short requests bound the stall when
// a request is lost or left unanswered (seen with small batches: the client
// then waits for the request to expire before asking again) at the cost of
// one request per pullExpiry on an idle consumer.
const pullExpiry = 5 * time.Second

// Consumer runs a Handler for the messages of a JetStream pull consumer on
// idem's consumer engine (broker.Consumer).
type Consumer struct {
	cons jetstream.Consumer
	g    *idem.Guard
	h    Handler
	opts Options
	t    transport // without an iterator: Process's
	eng  *broker.Consumer[jetstream.Msg]
}

// NewConsumer returns a consumer of cons running h for each message under
// g. Build g with NewGuard, whose scope defaults to the consumer's
// identity ("<stream>/<consumer>"), and leave idem.Options.Key at its
// default (idem.MessageID, which reads the id MessageOf puts in
// idem.Message.ID) or set it there.
//
// Everything is checked once, here: a nil consumer, guard or handler, a
// HandleTx handler whose Tx the guard's store has no transactions for, a
// missing JetStream or DeadLetterSubject, negative options and a
// DeadLetterSubject the consumer itself consumes are refused with an
// error wrapping idem.ErrInvalidOptions (and idem.ErrNoTx for the Tx
// mismatch).
func NewConsumer(cons jetstream.Consumer, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	if cons == nil {
		return nil, fmt.Errorf("%w: natsidem: nil jetstream.Consumer", idem.ErrInvalidOptions)
	}
	if err := h.Check(g); err != nil {
		return nil, err
	}
	switch {
	case opts.JetStream == nil:
		return nil, fmt.Errorf("%w: natsidem: Options.JetStream is required to publish dead letters", idem.ErrInvalidOptions)
	case opts.DeadLetterSubject == "":
		return nil, fmt.Errorf("%w: natsidem: Options.DeadLetterSubject is required (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	case strings.ContainsAny(opts.DeadLetterSubject, "*> \t"):
		return nil, fmt.Errorf("%w: natsidem: Options.DeadLetterSubject %q is not a subject to publish to", idem.ErrInvalidOptions, opts.DeadLetterSubject)
	case opts.Prefetch < 0:
		return nil, fmt.Errorf("%w: natsidem: negative Prefetch", idem.ErrInvalidOptions)
	}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = max(2*opts.Concurrency, 4)
	}
	if opts.AdvisoryStream == "" {
		opts.AdvisoryStream = DefaultAdvisoryStream
	}
	c := &Consumer{cons: cons, g: g, h: h, opts: opts,
		t: transport{cons: cons, js: opts.JetStream, dlq: opts.DeadLetterSubject, doubleAck: opts.DoubleAck}}
	if info := cons.CachedInfo(); info != nil {
		for _, f := range filterSubjects(info.Config) {
			if subjectMatches(f, opts.DeadLetterSubject) {
				return nil, fmt.Errorf("%w: natsidem: Options.DeadLetterSubject %q is consumed by the consumer itself (filter %q): dead letters would come back to it",
					idem.ErrInvalidOptions, opts.DeadLetterSubject, f)
			}
		}
		c.t.ackWait = info.Config.AckWait
		for _, b := range info.Config.BackOff {
			if b > 0 && (c.t.ackWait <= 0 || b < c.t.ackWait) {
				c.t.ackWait = b
			}
		}
		c.t.maxDeliver = info.Config.MaxDeliver
		c.t.name = info.Stream + "/" + info.Name
	}
	if eo.MaxDeliveries == 0 && c.t.maxDeliver > 0 {
		eo.MaxDeliveries = c.t.maxDeliver
	}
	eng, err := broker.NewConsumer[jetstream.Msg](&c.t, g, h, eo)
	if err != nil {
		return nil, err
	}
	c.eng = eng
	return c, nil
}

// filterSubjects are the subjects a consumer filters its stream by (none:
// the whole stream).
func filterSubjects(cfg jetstream.ConsumerConfig) []string {
	fs := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		fs = append([]string{cfg.FilterSubject}, fs...)
	}
	return fs
}

// subjectMatches reports whether subject falls under filter: "*" matches
// one token, a final ">" one or more.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		switch {
		case f == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case f != "*" && f != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// Consume is NewConsumer followed by Run.
func Consume(ctx context.Context, cons jetstream.Consumer, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewConsumer(cons, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run pulls and handles messages until ctx ends, then shuts down gracefully
// (broker.Consumer.Run): it stops pulling, naks the messages buffered but
// not started (so other consumers get them at once) and the held ones
// (with the delay until their holder's lease ends; one on its last allowed
// delivery is held on until ShutdownTimeout), waits for the in-flight
// handlers (cancelling their contexts after ShutdownTimeout) and returns
// nil. It returns an error if consuming cannot start or the iterator
// closes under it (connection closed, consumer deleted); in-flight
// handlers are finished first.
//
// While it runs, it also listens for JetStream's max-deliveries advisory of
// its consumer: a message JetStream gives up on (its last delivery went to
// a consumer that died before settling it) is dead-lettered from the
// stream by its sequence, unless its key is completed in the store (then
// it was applied). See the package doc.
//
// Several Runs, in one process or many, may share one durable consumer: they
// compete for its messages.
func (c *Consumer) Run(ctx context.Context) error {
	iter, err := c.cons.Messages(jetstream.PullMaxMessages(c.opts.Prefetch), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("natsidem: start consuming: %w", err)
	}
	defer iter.Stop()
	t := &transport{cons: c.t.cons, js: c.t.js, dlq: c.t.dlq, doubleAck: c.t.doubleAck,
		ackWait: c.t.ackWait, maxDeliver: c.t.maxDeliver, name: c.t.name}
	t.iter.Store(&iterator{iter})
	eng, err := broker.NewConsumer[jetstream.Msg](t, c.g, c.h, c.eng.Options())
	if err != nil {
		return err
	}
	stopAdvisories, err := c.watchMaxDeliveries(ctx, t)
	if err != nil {
		return err
	}
	defer stopAdvisories()
	return eng.Run(ctx)
}

// Process handles one message and takes its broker action, with the hooks
// of Options.Hooks; Run does the same for every message. It is for
// programs that run their own fetch loop (cons.Consume, Fetch): call it
// once per message, from any goroutine. A message whose key is in progress
// elsewhere, or whose store cannot be reached, is held inline (see
// Options.MaxHold), so Process may block that long; when ctx ends it is
// nak'ed.
func (c *Consumer) Process(ctx context.Context, msg jetstream.Msg) broker.Report {
	return c.eng.Process(ctx, msg)
}
