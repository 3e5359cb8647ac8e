package natsidem

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
)

// Dead-letter headers set by the consumer, beside idem's own
// (idem.HeaderDeadLetterKey, idem.HeaderFingerprint and the
// idem.HeaderStored* headers from idem.DeadLetterHeaders: the key, this
// message's fingerprint and, for a conflict or a parked record, the stored
// record's fingerprint, state, token, attempts and first-claim time).
const (
	HeaderReason    = idem.HeaderReason // conflict, no_key, invalid_key, parked, invalid_data, permanent, max_deliver
	HeaderError     = idem.HeaderError  // the error text (one line, at most 1 KiB)
	HeaderSubject   = "Idem-Subject"    // the original subject
	HeaderMsgID     = "Idem-Msg-Id"     // the original Nats-Msg-Id, as it was (see HeaderOriginalPrefix)
	HeaderStream    = "Idem-Stream"     // the original stream
	HeaderStreamSeq = "Idem-Stream-Seq" // the original stream sequence
	HeaderConsumer  = "Idem-Consumer"   // the consumer that dead-lettered it
	// HeaderTimestamp is when the original was stored in its stream (RFC
	// 3339, UTC): set beside idem.HeaderStoredCreatedAt, it tells an
	// operator whether the content that holds the key was claimed before
	// or after this message existed.
	HeaderTimestamp  = "Idem-Original-Timestamp"
	HeaderDeliveries = "Idem-Deliveries" // how many times it was delivered
	// HeaderOriginalPrefix prefixes the original's JetStream headers
	// (Nats-Msg-Id, Nats-Expected-*, ...), which would act on the
	// dead-letter stream under their own names: the dead letter carries
	// Idem-Original-Nats-Msg-Id with the original Nats-Msg-Id, as it was.
	// Every other header is copied as it was, under its own name.
	HeaderOriginalPrefix = "Idem-Original-"
)

// ackTimeout bounds an ack, nak, term or dead-letter publish when the
// handler's context has ended (shutdown): the outcome is known and should
// reach the server.
const ackTimeout = 10 * time.Second

// delivery is a message on its way to its broker action.
type delivery struct {
	p    *consume.Pending[jetstream.Msg]
	stop func() // ends the message's keep-alive
}

// start begins the way of msg: its guard view, its delivery count and its
// keep-alive, which runs until its action, holds included.
func (c *Consumer) start(msg jetstream.Msg) *delivery {
	attempt := deliveries(msg)
	return &delivery{
		p: &consume.Pending[jetstream.Msg]{Msg: msg, Message: MessageOf(msg), Attempt: attempt,
			Last: c.maxDeliver > 0 && attempt >= c.maxDeliver},
		stop: c.keepAlive(msg),
	}
}

// finish takes d's broker action.
func (c *Consumer) finish(ctx context.Context, d *delivery) broker.Report {
	d.stop()
	return c.act(ctx, d.p)
}

// Process handles one message and takes its broker action, with the hooks
// of Options.Hooks; Run calls it for every message. It is exported for
// programs that run their own fetch loop (cons.Consume, Fetch): call it
// once per message, from any goroutine. A message whose key is in progress
// elsewhere is held inline (see Options.MaxHold), so Process may block that
// long; when ctx ends it is nak'ed.
func (c *Consumer) Process(ctx context.Context, msg jetstream.Msg) broker.Report {
	d := c.start(msg)
	c.drv.Drive(ctx, ctx.Done(), d.p)
	return c.finish(ctx, d)
}

// act takes the broker action for p's latest outcome, calling the hooks
// around it, and returns its report.
func (c *Consumer) act(ctx context.Context, p *consume.Pending[jetstream.Msg]) broker.Report {
	msg := p.Msg
	r := c.drv.Decide(p)
	hooks := c.opts.Hooks
	hooks.CallBeforeSettle(ctx, msg, r)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	switch r.Action {
	case idem.ActionAck:
		if c.opts.DoubleAck {
			r.BrokerErr = msg.DoubleAck(actx)
		} else {
			r.BrokerErr = msg.Ack()
		}
	case idem.ActionRetry:
		r.BrokerErr = msg.NakWithDelay(r.Delay)
	case idem.ActionDeadLetter:
		h := consume.DeadLetterHeaders(c.g, p.Message, p.Result, p.Err, r.Reason)
		r.Reason = h[HeaderReason]
		if perr := c.deadLetter(actx, msg, h); perr != nil {
			// Not terminated: the message comes back and is dead-lettered
			// again once the dead-letter subject accepts it.
			r.Delay = c.opts.Backoff(p.Attempt)
			r.BrokerErr = perr
			if nerr := msg.NakWithDelay(r.Delay); nerr != nil {
				r.BrokerErr = fmt.Errorf("%w; nak: %w", perr, nerr)
			}
			c.reportErr(r.BrokerErr)
			break
		}
		hooks.CallOnDeadLetter(ctx, msg, r)
		r.BrokerErr = msg.Term()
	}
	hooks.CallAfterSettle(ctx, msg, r)
	return r
}

// deadLetter publishes a copy of msg with the idem headers h to the
// dead-letter subject and waits for the stream's ack.
func (c *Consumer) deadLetter(ctx context.Context, msg jetstream.Msg, h map[string]string) error {
	dl := nats.NewMsg(c.opts.DeadLetterSubject)
	dl.Data = msg.Data()
	var control []string
	for k, v := range msg.Headers() {
		// JetStream control headers (Nats-Expected-*, Nats-Msg-Id, ...) must
		// not act on the dead-letter stream: they travel prefixed, over any
		// prefixed copy an earlier dead-lettering left.
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			control = append(control, k)
			continue
		}
		dl.Header[k] = v
	}
	for _, k := range control {
		dl.Header[HeaderOriginalPrefix+k] = msg.Headers()[k]
	}
	for k, v := range h {
		dl.Header.Set(k, v)
	}
	dl.Header.Set(HeaderSubject, msg.Subject())
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		dl.Header.Set(HeaderMsgID, id)
	}
	if c.name != "" {
		dl.Header.Set(HeaderConsumer, c.name)
	}
	if md, err := msg.Metadata(); err == nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dl.Header.Set(HeaderStream, md.Stream)
		dl.Header.Set(HeaderStreamSeq, seq)
		dl.Header.Set(HeaderDeliveries, strconv.FormatUint(md.NumDelivered, 10))
		if !md.Timestamp.IsZero() {
			dl.Header.Set(HeaderTimestamp, md.Timestamp.UTC().Format(time.RFC3339Nano))
		}
		// One dead letter per stored message and consumer: a repeat after a
		// lost Term is dropped by the dead-letter stream's duplicate
		// window, another consumer's dead letter of the same message is
		// not.
		src := md.Stream
		if c.name != "" {
			src = c.name
		}
		dl.Header.Set(jetstream.MsgIDHeader, "idem-dlq:"+src+":"+seq)
	}
	if _, err := c.opts.JetStream.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("natsidem: publish dead letter to %s: %w", c.opts.DeadLetterSubject, err)
	}
	return nil
}

// keepAlive tells the server the message is in progress every AckWait/2
// while the handler runs and while the message is held, so it is not
// redelivered to a competing consumer (which would only find the key in
// progress) and spends no delivery. Without the consumer's info (no
// AckWait known) it ticks every defaultKeepAlive. The returned function
// stops it and waits for it.
func (c *Consumer) keepAlive(msg jetstream.Msg) (stop func()) {
	every := defaultKeepAlive
	if c.ackWait > 0 {
		every = max(c.ackWait/2, time.Millisecond)
	}
	// A timer rather than a goroutine with a ticker: most messages are
	// done long before the first tick, and a goroutine started and joined
	// per message cost the consumer about 4% of its CPU.
	var (
		mu      sync.Mutex // held while a tick runs, so stop waits for it
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		// A failed InProgress only risks a redelivery, which the record
		// turns into a retry or a duplicate.
		_ = msg.InProgress()
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// defaultKeepAlive is the keep-alive period when the consumer's AckWait
// is not known: half JetStream's default AckWait, 30s.
const defaultKeepAlive = 15 * time.Second

// deliveries is the message's delivery count (1 on the first delivery).
func deliveries(msg jetstream.Msg) int {
	md, err := msg.Metadata()
	if err != nil || md.NumDelivered == 0 {
		return 1
	}
	return int(md.NumDelivered)
}
