package natsidem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Options configure a Consumer. JetStream and DeadLetterSubject are
// required; the zero value of every other field is a sensible default. The
// scope and the key are the guard's (idem.Options.Scope, filled by
// NewGuard, and idem.Options.Key over MessageOf), never the consumer's.
type Options struct {
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
	// Concurrency is how many messages are handled at once. Default 1.
	Concurrency int
	// Prefetch is how many messages the client buffers ahead of the
	// handlers (PullMaxMessages). Default 2*Concurrency, at least 4 (pulls
	// of one or two messages have been seen to stall until the pull
	// expires). Buffered messages count against the consumer's
	// MaxAckPending, and their AckWait runs while they wait: keep
	// Prefetch/Concurrency times the handler's duration under AckWait.
	Prefetch int
	// Backoff gives the NakWithDelay delay for a retried message from its
	// delivery count (1 for the first delivery), and the pace at which a
	// held message is claimed again (from its round). Default
	// idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff). A key
	// in progress elsewhere is not retried on this back-off: see MaxHold.
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long a message whose key is in progress elsewhere
	// is held before it is nak'ed. Held, it spends none of the consumer's
	// MaxDeliver: the consumer tells the server it is in progress and
	// claims the key again on the back-off, at the latest when the holder's
	// lease ends (then a crashed holder's claim is retaken as stale). Past
	// MaxHold, or when Run shuts down, it is nak'ed with the delay until
	// the holder's lease ends (idem.RetryAfter). On its last allowed
	// delivery it is held without bound: a nak would let JetStream drop it.
	// Held messages wait outside the Concurrency workers; they count
	// against the consumer's MaxAckPending. Default DefaultMaxHold;
	// negative: never held (nak'ed at once, with the delay until the lease
	// ends).
	MaxHold time.Duration
	// DoubleAck acknowledges with DoubleAck, waiting for the server to
	// confirm. A lost plain Ack is harmless (the redelivery is a duplicate
	// acked without running the handler); DoubleAck trades a round trip per
	// message for fewer such redeliveries and ack failures in the Report.
	DoubleAck bool
	// ShutdownTimeout bounds how long Run waits for in-flight handlers after
	// its context ends before cancelling their contexts (it still waits for
	// them to return). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in the flow of each message (see
	// broker.Hooks): BeforeSettle once the outcome is known and before the
	// ack, nak or dead letter; OnDeadLetter once a dead letter is stored by
	// its stream (alert on conflicts there); AfterSettle after the action,
	// with BrokerErr set when it failed; OnError for the errors the
	// consumer handles by itself (fetch errors and reconnections, failed
	// dead-letter publishes, which are retried, and naks on shutdown).
	// A held message yields one Report, when it is settled. Hooks run on
	// the goroutine that handled the message and must be safe for
	// concurrent use.
	Hooks broker.Hooks[jetstream.Msg]
}

// Default back-off bounds for NakWithDelay (Options.Backoff).
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// DefaultMaxHold is the default of Options.MaxHold.
const DefaultMaxHold = 5 * time.Minute

// ReasonMaxDeliver is broker.ReasonMaxDeliver, the dead-letter reason of a
// message that would be retried on its last allowed delivery (the
// consumer's MaxDeliver): JetStream would otherwise drop it silently. A key
// in progress elsewhere never gets there while it is held; only a shutdown
// that outlasts ShutdownTimeout during such a hold dead-letters it (with
// Idem-Stored-State in_progress).
const ReasonMaxDeliver = broker.ReasonMaxDeliver

// pullExpiry bounds each pull request. Short requests bound the stall when
// a request is lost or left unanswered (seen with small batches: the client
// then waits for the request to expire before asking again) at the cost of
// one request per pullExpiry on an idle consumer.
const pullExpiry = 5 * time.Second

// Consumer runs a Handler for the messages of a JetStream pull consumer.
type Consumer struct {
	cons       jetstream.Consumer
	g          *idem.Guard
	opts       Options
	drv        consume.Driver[jetstream.Msg]
	ackWait    time.Duration // the shortest ack wait of the consumer (AckWait, BackOff)
	maxDeliver int
	name       string
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
	case opts.Concurrency < 0 || opts.Prefetch < 0 || opts.ShutdownTimeout < 0:
		return nil, fmt.Errorf("%w: natsidem: negative Concurrency, Prefetch or ShutdownTimeout", idem.ErrInvalidOptions)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.Prefetch == 0 {
		opts.Prefetch = max(2*opts.Concurrency, 4)
	}
	if opts.Backoff == nil {
		opts.Backoff = idem.ExponentialBackoff(DefaultMinBackoff, DefaultMaxBackoff)
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.MaxHold == 0 {
		opts.MaxHold = DefaultMaxHold
	}
	c := &Consumer{cons: cons, g: g, opts: opts,
		drv: consume.Driver[jetstream.Msg]{Handler: h, Guard: g, Backoff: opts.Backoff, MaxHold: opts.MaxHold}}
	if info := cons.CachedInfo(); info != nil {
		for _, f := range filterSubjects(info.Config) {
			if subjectMatches(f, opts.DeadLetterSubject) {
				return nil, fmt.Errorf("%w: natsidem: Options.DeadLetterSubject %q is consumed by the consumer itself (filter %q): dead letters would come back to it",
					idem.ErrInvalidOptions, opts.DeadLetterSubject, f)
			}
		}
		c.ackWait = info.Config.AckWait
		for _, b := range info.Config.BackOff {
			if b > 0 && (c.ackWait <= 0 || b < c.ackWait) {
				c.ackWait = b
			}
		}
		c.maxDeliver = info.Config.MaxDeliver
		c.name = info.Stream + "/" + info.Name
	}
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

// Run pulls and handles messages until ctx ends, then shuts down gracefully:
// it stops pulling, naks the messages buffered but not started (so other
// consumers get them at once) and the held ones (with the delay until their
// holder's lease ends; one on its last allowed delivery is held on until
// ShutdownTimeout), waits for the in-flight handlers (cancelling their
// contexts after ShutdownTimeout) and returns nil. It returns an error if
// consuming cannot start or the iterator closes under it (connection
// closed, consumer deleted); in-flight handlers are finished first.
//
// Several Runs, in one process or many, may share one durable consumer: they
// compete for its messages.
func (c *Consumer) Run(ctx context.Context) error {
	iter, err := c.cons.Messages(jetstream.PullMaxMessages(c.opts.Prefetch), jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return fmt.Errorf("natsidem: start consuming: %w", err)
	}
	defer iter.Stop()

	// stop ends when the pull loop does (ctx ended or the iterator
	// closed); handlers outlive it so that a shutdown finishes them, and
	// workCtx ends ShutdownTimeout after it.
	stopCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	stop := stopCtx.Done()
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	// A fixed pool of workers: their stacks stay grown, where a goroutine
	// per message would grow a fresh stack through the guard every time.
	// A message whose key is in progress elsewhere waits in a goroutine of
	// its own (hold), freeing its worker and its slot, and comes back
	// through again to be claimed by a worker.
	slots := make(chan struct{}, c.opts.Concurrency)
	work := make(chan jetstream.Msg, c.opts.Concurrency)
	again := make(chan *delivery)
	var wg sync.WaitGroup
	var hold func(d *delivery, wait time.Duration)
	claim := func(d *delivery) {
		if wait, held := c.drv.Claim(workCtx, d.p); held {
			wg.Add(1) // the calling worker is still counted: never from zero
			go hold(d, wait)
			return
		}
		c.finish(workCtx, d)
	}
	hold = func(d *delivery, wait time.Duration) {
		defer wg.Done()
		until := time.Now().Add(wait)
		if consume.Sleep(wait, stop) {
			select {
			case again <- d:
				return
			case <-stop:
			}
		}
		// Shutting down: no worker claims it again. It is nak'ed now,
		// unless this is its last delivery: that is held on, and claimed
		// here, until workCtx ends.
		c.drv.Resume(workCtx, stop, d.p, time.Until(until), true)
		c.finish(workCtx, d)
	}
	for range c.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case msg, ok := <-work:
					if !ok {
						return
					}
					if stopCtx.Err() != nil {
						// Shutdown began as msg was pulled (a freed slot and a
						// cancelled ctx race in the select below): it goes back
						// unstarted, like the buffered ones.
						if err := msg.Nak(); err != nil {
							c.reportErr(fmt.Errorf("natsidem: nak on shutdown: %w", err))
						}
						<-slots
						continue
					}
					claim(c.start(msg))
					<-slots
				case d := <-again:
					claim(d)
				}
			}
		}()
	}
	var runErr, lastErr error
loop:
	for {
		// Take a slot before pulling, so no message waits on a busy worker.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		msg, err := iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			<-slots
			switch {
			case ctx.Err() != nil:
				break loop
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				runErr = fmt.Errorf("natsidem: consumer %s: %w", c.name, err)
				if lastErr != nil { // what closed it (consumer deleted, ...)
					runErr = fmt.Errorf("%w (after: %w)", runErr, lastErr)
				}
				break loop
			}
			lastErr = err
			c.reportErr(err) // the iterator keeps pulling unless err ended it
			continue
		}
		work <- msg // never blocks: the slot bounds the messages in work
	}
	stopRun()
	close(work)

	// Stop pulling; hand back what is buffered but not started.
	iter.Drain()
	for {
		msg, err := iter.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			break
		}
		if err := msg.Nak(); err != nil {
			c.reportErr(fmt.Errorf("natsidem: nak on shutdown: %w", err))
		}
	}
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelWork)
	wg.Wait()
	t.Stop()
	return runErr
}

func (c *Consumer) reportErr(err error) { c.opts.Hooks.CallOnError(err) }
