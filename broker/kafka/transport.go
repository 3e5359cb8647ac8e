package kafka

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// MessageOf converts a record into what the guard reads: the
// idempotency-key header (DefaultKeyHeader) as ID, so that the guard's
// default key (idem.MessageID) works; the headers (the first value wins
// when a header repeats); the value as payload; and the content-type header
// (set by the CloudEvents Kafka binding in structured mode). Kafka has no
// producer-assigned message id and no correlation id of its own: a record
// without the header has no ID (the offset is not one: a producer retry
// writes the same message at a new offset), and CorrelationID stays empty
// (idem.DefaultCorrelation then reads the W3C traceparent header).
func MessageOf(rec *kgo.Record) idem.Message {
	m := idem.Message{Payload: rec.Value}
	if len(rec.Headers) == 0 {
		return m
	}
	m.Headers = make(map[string]string, len(rec.Headers))
	// The values are copied into one string, each header's its slice of
	// it: one allocation for all of them, not one each (this runs for
	// every record).
	n := 0
	for _, h := range rec.Headers {
		n += len(h.Value)
	}
	var b strings.Builder
	b.Grow(n)
	for _, h := range rec.Headers {
		b.Write(h.Value)
	}
	all, at := b.String(), 0
	for _, h := range rec.Headers {
		v := all[at : at+len(h.Value)]
		at += len(h.Value)
		if _, ok := m.Headers[h.Key]; !ok {
			m.Headers[h.Key] = v
		}
	}
	// Each header found is the first of its name: its value in the map.
	id, ct, _ := guardHeaders(rec.Headers)
	if id >= 0 {
		m.ID = m.Headers[DefaultKeyHeader]
	}
	if ct >= 0 {
		m.ContentType = m.Headers[rec.Headers[ct].Key]
	}
	return m
}

// guardHeaders finds in hs the headers that MessageOf and guardMessage
// read beside the map: id, the first DefaultKeyHeader; ct and tp, the
// content type and the traceparent as Message.Header reads them, the first
// header of that exact name, else the first one so named in another case.
// -1 for a header not found.
func guardHeaders(hs []kgo.RecordHeader) (id, ct, tp int) {
	id, ct, tp = -1, -1, -1
	var ctExact, tpExact bool
	for i := range hs {
		switch k := hs[i].Key; {
		case k == DefaultKeyHeader:
			if id < 0 {
				id = i
			}
		case k == "content-type":
			if !ctExact {
				ct, ctExact = i, true
			}
		case k == "traceparent":
			if !tpExact {
				tp, tpExact = i, true
			}
		case ct < 0 && strings.EqualFold(k, "content-type"):
			ct = i
		case tp < 0 && strings.EqualFold(k, "traceparent"):
			tp = i
		}
	}
	return id, ct, tp
}

// guardMessage is MessageOf(rec) for a guard that reads of a message only
// its ID, payload and correlation (idem.Options' Key, Fingerprint and
// Correlation left to their defaults): the same ID, payload and content
// type, and as CorrelationID the trace id that idem.DefaultCorrelation
// would read from the traceparent header, but no map of the headers. The
// map was about 320 bytes a record, and a fifth of the consumer's own CPU
// (broker/kafka/BENCH.md). The guard's key, fingerprint and correlation id
// of the two messages are the same (TestGuardMessage).
func guardMessage(rec *kgo.Record) idem.Message {
	m := idem.Message{Payload: rec.Value}
	id, ct, tp := guardHeaders(rec.Headers)
	if id >= 0 {
		m.ID = string(rec.Headers[id].Value)
	}
	if ct >= 0 {
		m.ContentType = string(rec.Headers[ct].Value)
	}
	if tp >= 0 {
		m.CorrelationID = idem.TraceID(string(rec.Headers[tp].Value))
	}
	return m
}

// message is the message the consumer's guard reads for rec.
func (c *Consumer) message(rec *kgo.Record) idem.Message {
	if c.lite {
		return guardMessage(rec)
	}
	return MessageOf(rec)
}

// Key returns the key the consumer stores for rec: the guard's key function
// applied to MessageOf(rec), in the guard's scope, validated.
func (c *Consumer) Key(rec *kgo.Record) (idem.Key, error) {
	return c.g.Key(MessageOf(rec))
}

// transport settles one partition's records for the engine's processor.
// Kafka keeps an order per partition and never redelivers to a running
// consumer, so the consumer schedules records itself: each partition
// hands its head record to its processor (broker.Processor.ProcessUntil)
// and, for a retry, waits the report's delay and hands it again (Retry is
// in place); a record is done once acked or dead-lettered, and its offset
// is then committed.
type transport struct {
	c *Consumer
	p *partition
}

// Message is the consumer's message of rec (MessageOf, or guardMessage),
// read once per record: one claimed ahead in its partition's batch has
// the message its claim was made with (the engine asks on the
// partition's goroutine, which owns the batch).
func (t transport) Message(rec *kgo.Record) idem.Message {
	if a := t.p.ahead; len(a) > 0 && a[0].rec == rec {
		return a[0].im
	}
	return t.c.message(rec)
}

// Delivery is the record's try in this process: Kafka counts no
// deliveries and has no limit (never Last).
func (t transport) Delivery(rec *kgo.Record) broker.Delivery {
	return broker.Delivery{Attempt: max(t.p.attempts, 1)}
}

// Ack does nothing: the partition marks the record done from the report,
// and its offset is committed with the next commit.
func (t transport) Ack(context.Context, *kgo.Record) error { return nil }

// Retry does nothing: the record is retried in place, its partition held.
func (t transport) Retry(context.Context, *kgo.Record, time.Duration) error { return nil }

// SettlesInPlace reports that Ack and Retry do nothing at the broker
// (broker.InPlace): the engine gives them no settle context of their own.
func (transport) SettlesInPlace() bool { return true }

// DeadLetter produces the dead letter and waits for the broker's ack; a
// checkpoint handler's position then moves past the record.
func (t transport) DeadLetter(ctx context.Context, rec *kgo.Record, d broker.DeadLetter) error {
	c := t.c
	pctx, cancel := context.WithTimeout(ctx, c.opts.DeadLetterTimeout)
	err := produceWithin(pctx, c.opts.Producer, DeadLetter(c.opts.DeadLetterTopic, rec, d.Headers))
	cancel()
	if err != nil {
		return &DeadLetterError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: d.Reason, Err: err}
	}
	if c.h.cp != nil {
		c.passCheckpoint(ctx, rec)
	}
	return nil
}

// produceWithin produces rec and waits for the broker's ack until ctx
// ends, then returns ctx's error. ProduceSync can wait past its context:
// franz-go cancels a record only while it is not in flight, and a record
// whose connection is gone (the broker unreachable, a network cut) can wait
// for its retries far longer. The record stays with the client: it may
// still be produced, or fail, after its wait ends here.
func produceWithin(ctx context.Context, cl *kgo.Client, rec *kgo.Record) error {
	done := make(chan error, 1)
	cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunHandler runs a two-phase handler under the claim its partition made
// ahead in a batch, when there is one (broker.Runner).
func (t transport) RunHandler(ctx context.Context, h broker.Handler[*kgo.Record], g *idem.Guard, im idem.Message, rec *kgo.Record) (idem.Result, error) {
	if t.c.batch {
		return t.c.runAhead(ctx, t.p, h, rec, im)
	}
	return h.Run(ctx, g, im, rec)
}

// Dead-letter headers. The idem headers (idem.HeaderReason, idem.HeaderError,
// idem.HeaderDeadLetterKey, idem.HeaderFingerprint and the
// idem.HeaderStored* headers, from idem.DeadLetterHeaders) say why; these
// say where from.
const (
	HeaderReason            = idem.HeaderReason // the same name as idem.HeaderReason
	HeaderError             = idem.HeaderError  // the same name as idem.HeaderError
	HeaderOriginalTopic     = "Idem-Original-Topic"
	HeaderOriginalPartition = "Idem-Original-Partition"
	HeaderOriginalOffset    = "Idem-Original-Offset"
	HeaderOriginalTimestamp = "Idem-Original-Timestamp" // the record's timestamp (RFC 3339, UTC)
)

// DeadLetter builds the dead letter of rec for topic with the engine's
// dead-letter headers h (broker.DeadLetterHeaders): the same key and
// value; first the idem headers (the reason, the error, the key, this
// record's fingerprint, and where a record was read the stored record's
// fingerprint, state, token, attempts and first-claim time) and the
// original topic, partition, offset and timestamp; then rec's own headers
// exactly as they were, in their order, repeats included.
//
// A replayed dead letter that is dead-lettered again keeps its earlier idem
// headers among the original ones, after the new: the first value of a
// header is this dead-lettering's.
func DeadLetter(topic string, rec *kgo.Record, h map[string]string) *kgo.Record {
	h = maps.Clone(h)
	hs := make([]kgo.RecordHeader, 0, len(h)+4+len(rec.Headers))
	for _, k := range broker.DeadLetterHeaderNames {
		if v, ok := h[k]; ok {
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			delete(h, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h)) { // any the engine adds later
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(h[k])})
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderOriginalPartition, Value: itoa(int64(rec.Partition))},
		kgo.RecordHeader{Key: HeaderOriginalOffset, Value: itoa(rec.Offset)},
	)
	if !rec.Timestamp.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderOriginalTimestamp, Value: []byte(rec.Timestamp.UTC().Format(time.RFC3339Nano))})
	}
	hs = append(hs, rec.Headers...)
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: hs}
}

func itoa(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
