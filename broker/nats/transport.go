package natsidem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Dead-letter headers set by the consumer, beside idem's own
// (idem.HeaderDeadLetterKey, idem.HeaderFingerprint and the
// idem.HeaderStored* headers from broker.DeadLetterHeaders: the key, this
// message's fingerprint and, for a conflict or a parked record, the stored
// record's fingerprint, state, token, attempts and first-claim time).
const (
	HeaderReason    = "Idem-Reason"     // conflict, no_key, invalid_key, parked, invalid_data, permanent, max_deliver
	HeaderError     = "Idem-Error"      // the error text (one line, at most 1 KiB)
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

// transport moves JetStream messages for the engine.
type transport struct {
	cons       jetstream.Consumer
	js         jetstream.JetStream
	dlq        string
	doubleAck  bool
	ackWait    time.Duration // the shortest ack wait of the consumer (AckWait, BackOff)
	maxDeliver int
	name       string // "<stream>/<consumer>"

	iter atomic.Pointer[iterator] // the running Run's message iterator
}

type iterator struct{ jetstream.MessagesContext }

// Receive returns the next message of the running iterator (one at a
// time: the iterator buffers Prefetch of them).
func (t *transport) Receive(ctx context.Context, _ int) ([]jetstream.Msg, error) {
	it := t.iter.Load()
	if it == nil {
		return nil, fmt.Errorf("%w: natsidem: not running", broker.ErrClosed)
	}
	msg, err := it.Next(jetstream.NextContext(ctx))
	switch {
	case err == nil:
		return []jetstream.Msg{msg}, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, jetstream.ErrMsgIteratorClosed):
		return nil, fmt.Errorf("%w: natsidem: consumer %s: %w", broker.ErrClosed, t.name, err)
	}
	return nil, err // the iterator keeps pulling unless err ended it
}

// Drain stops pulling and returns what the iterator buffered.
func (t *transport) Drain(context.Context) []jetstream.Msg {
	it := t.iter.Load()
	if it == nil {
		return nil
	}
	it.Drain()
	var out []jetstream.Msg
	for {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			return out
		}
		out = append(out, msg)
	}
}

func (t *transport) Message(msg jetstream.Msg) idem.Message { return MessageOf(msg) }

func (t *transport) Delivery(msg jetstream.Msg) broker.Delivery {
	n := deliveries(msg)
	return broker.Delivery{Attempt: n, Last: t.maxDeliver > 0 && n >= t.maxDeliver}
}

func (t *transport) Ack(ctx context.Context, msg jetstream.Msg) error {
	if t.doubleAck {
		return msg.DoubleAck(ctx)
	}
	return msg.Ack()
}

func (t *transport) Retry(_ context.Context, msg jetstream.Msg, delay time.Duration) error {
	if delay <= 0 {
		return msg.Nak()
	}
	return msg.NakWithDelay(delay)
}

// Return gives a message back unstarted: a plain Nak, redelivered at once
// to another consumer.
func (t *transport) Return(_ context.Context, msg jetstream.Msg) error { return msg.Nak() }

// KeepAlive tells the server the message is in progress, so it is not
// redelivered to a competing consumer (which would only find the key in
// progress) and spends no delivery. A failed InProgress only risks a
// redelivery, which the record turns into a retry or a duplicate.
func (t *transport) KeepAlive(_ context.Context, msg jetstream.Msg) error { return msg.InProgress() }

// KeepAliveEvery is half the consumer's ack wait (defaultKeepAlive when
// it is not known).
func (t *transport) KeepAliveEvery(jetstream.Msg) time.Duration {
	if t.ackWait > 0 {
		return max(t.ackWait/2, time.Millisecond)
	}
	return defaultKeepAlive
}

// defaultKeepAlive is the keep-alive period when the consumer's AckWait
// is not known: half JetStream's default AckWait, 30s.
const defaultKeepAlive = 15 * time.Second

// DeadLetter publishes a copy of msg with the engine's headers and its
// position to the dead-letter subject, waits for the stream's ack, and
// terminates the original.
func (t *transport) DeadLetter(ctx context.Context, msg jetstream.Msg, d broker.DeadLetter) error {
	md, err := msg.Metadata()
	if err != nil {
		md = nil
	}
	if err := t.publishDeadLetter(ctx, msg.Subject(), msg.Headers(), msg.Data(), md, d.Headers); err != nil {
		return err
	}
	return msg.Term()
}

// publishDeadLetter publishes the dead letter of a stored message (subject,
// headers, data, its metadata when known) with idem's headers h.
func (t *transport) publishDeadLetter(ctx context.Context, subject string, orig nats.Header, data []byte, md *jetstream.MsgMetadata, h map[string]string) error {
	dl := nats.NewMsg(t.dlq)
	dl.Data = data
	var control []string
	for k, v := range orig {
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
		dl.Header[HeaderOriginalPrefix+k] = orig[k]
	}
	for k, v := range h {
		dl.Header.Set(k, v)
	}
	dl.Header.Set(HeaderSubject, subject)
	if id := orig.Get(jetstream.MsgIDHeader); id != "" {
		dl.Header.Set(HeaderMsgID, id)
	}
	if t.name != "" {
		dl.Header.Set(HeaderConsumer, t.name)
	}
	if md != nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dl.Header.Set(HeaderStream, md.Stream)
		dl.Header.Set(HeaderStreamSeq, seq)
		dl.Header.Set(HeaderDeliveries, strconv.FormatUint(md.NumDelivered, 10))
		if !md.Timestamp.IsZero() {
			dl.Header.Set(HeaderTimestamp, md.Timestamp.UTC().Format(time.RFC3339Nano))
		}
		// One dead letter per stored message and consumer: a repeat after a
		// lost Term (or the max-deliveries advisory of a message dead-lettered
		// already) is dropped by the dead-letter stream's duplicate window,
		// another consumer's dead letter of the same message is not.
		src := md.Stream
		if t.name != "" {
			src = t.name
		}
		dl.Header.Set(jetstream.MsgIDHeader, "idem-dlq:"+src+":"+seq)
	}
	if _, err := t.js.PublishMsg(ctx, dl); err != nil {
		return fmt.Errorf("natsidem: publish dead letter to %s: %w", t.dlq, err)
	}
	return nil
}

// deliveries is the message's delivery count (1 on the first delivery).
func deliveries(msg jetstream.Msg) int {
	md, err := msg.Metadata()
	if err != nil || md.NumDelivered == 0 {
		return 1
	}
	return int(md.NumDelivered)
}
