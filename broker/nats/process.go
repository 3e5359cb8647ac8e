package natsidem

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/consume"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dead-letter headers.
const (
	HeaderReason    = "Idem-Reason"     // conflict, no_key, invalid_key, parked, permanent, max_deliver
	HeaderError     = "Idem-Error"      // the error text (one line, at most 1 KiB)
	HeaderSubject   = "Idem-Subject"    // the original subject
	HeaderMsgID     = "Idem-Msg-Id"     // the original Nats-Msg-Id
	HeaderStream    = "Idem-Stream"     // the original stream
	HeaderStreamSeq = "Idem-Stream-Seq" // the original stream sequence
	HeaderConsumer  = "Idem-Consumer"   // the consumer that dead-lettered it
)

// ackTimeout bounds an ack, nak, term or dead-letter publish when the
// handler's context has ended (shutdown): the outcome is known and should
// reach the server.
const ackTimeout = 10 * time.Second

// Process handles one message and takes its broker action; Run calls it for
// every message. It is exported for programs that run their own fetch loop
// (cons.Consume, Fetch): call it once per message, from any goroutine.
func (c *Consumer) Process(ctx context.Context, msg jetstream.Msg) Report {
	im := c.opts.Message(msg)
	stop := c.keepAlive(msg)
	res, err := consume.Run(ctx, c.h, c.g, im, msg)
	stop()

	r := Report{Result: res, Err: err, Action: idem.Decide(res, err)}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	attempt := deliveries(msg)
	if r.Action == idem.ActionRetry && c.maxDeliver > 0 && attempt >= c.maxDeliver {
		r.Action, r.Reason = idem.ActionDeadLetter, ReasonMaxDeliver
	}
	switch r.Action {
	case idem.ActionAck:
		if c.opts.DoubleAck {
			r.BrokerErr = msg.DoubleAck(actx)
		} else {
			r.BrokerErr = msg.Ack()
		}
	case idem.ActionRetry:
		r.Delay = c.opts.Backoff(attempt)
		r.BrokerErr = msg.NakWithDelay(r.Delay)
	case idem.ActionDeadLetter:
		if r.Reason == "" {
			r.Reason = idem.DeadLetterReason(err)
		}
		if r.Reason == "" {
			r.Reason = "permanent"
		}
		if perr := c.deadLetter(actx, msg, r.Reason, err); perr != nil {
			// Not terminated: the message comes back and is dead-lettered
			// again once the dead-letter subject accepts it.
			r.Delay = c.opts.Backoff(attempt)
			r.BrokerErr = perr
			if nerr := msg.NakWithDelay(r.Delay); nerr != nil {
				r.BrokerErr = fmt.Errorf("%w; nak: %w", perr, nerr)
			}
			break
		}
		r.BrokerErr = msg.Term()
	}
	return r
}

// deadLetter publishes a copy of msg to the dead-letter subject and waits
// for the stream's ack.
func (c *Consumer) deadLetter(ctx context.Context, msg jetstream.Msg, reason string, cause error) error {
	dl := nats.NewMsg(c.opts.DeadLetterSubject)
	dl.Data = msg.Data()
	for k, v := range msg.Headers() {
		// JetStream control headers (Nats-Expected-*, Nats-Msg-Id, ...) must
		// not act on the dead-letter stream.
		if len(k) >= 5 && (k[:5] == "Nats-" || k[:5] == "nats-") {
			continue
		}
		dl.Header[k] = v
	}
	errText := ""
	if cause != nil {
		errText = cause.Error()
	}
	dl.Header.Set(HeaderReason, reason)
	dl.Header.Set(HeaderError, headerValue(errText))
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
		// One dead letter per stored message: a repeat after a lost Term is
		// dropped by the dead-letter stream's duplicate window.
		dl.Header.Set(jetstream.MsgIDHeader, "idem-dlq:"+md.Stream+":"+seq)
	}
	if _, err := c.opts.JetStream.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("natsidem: publish dead letter to %s: %w", c.opts.DeadLetterSubject, err)
	}
	return nil
}

// keepAlive tells the server the message is in progress every AckWait/2
// while the handler runs, so a long handler is not redelivered to a
// competing consumer (which would only find the key in progress and nak).
// The returned function stops it and waits for it.
func (c *Consumer) keepAlive(msg jetstream.Msg) (stop func()) {
	if c.ackWait <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(c.ackWait / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// A failed InProgress only risks a redelivery, which the
				// record turns into a retry or a duplicate.
				_ = msg.InProgress()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// deliveries is the message's delivery count (1 on the first delivery).
func deliveries(msg jetstream.Msg) int {
	md, err := msg.Metadata()
	if err != nil || md.NumDelivered == 0 {
		return 1
	}
	return int(md.NumDelivered)
}
