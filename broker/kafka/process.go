package kafka

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// MessageOf converts a record into what the guard reads: headers (the first
// value wins when a header repeats), the value as payload, and the
// content-type header (set by the CloudEvents Kafka binding in structured
// mode). ID stays empty: Kafka has no producer-assigned message id, and the
// offset is not one (a producer retry writes the same message at a new
// offset).
func MessageOf(rec *kgo.Record) idem.Message {
	m := idem.Message{Payload: rec.Value}
	if len(rec.Headers) > 0 {
		m.Headers = make(map[string]string, len(rec.Headers))
		for _, h := range rec.Headers {
			if _, ok := m.Headers[h.Key]; !ok {
				m.Headers[h.Key] = string(h.Value)
			}
		}
		m.ContentType = m.Header("content-type")
	}
	return m
}

// Key returns the key the consumer stores for rec: Options.Key's id in
// Options.Scope, validated.
func (c *Consumer) Key(rec *kgo.Record) (idem.Key, error) {
	return c.g.Key(MessageOf(rec))
}

// process runs one record through the guard and acts on the outcome. It
// reports whether the record is done (processed, a duplicate, or
// dead-lettered with the dead letter acknowledged) and, when it is not, how
// long the partition is held before the record is tried again: for a key in
// progress elsewhere until the holder's lease ends, plus jitter
// (idem.RetryAfter), so that the retry finds the key completed (a
// duplicate), renewed (held again) or orphaned (retaken as stale); for
// everything else the attempt's back-off.
func (c *Consumer) process(p *partition, rec *kgo.Record, do doFunc) (bool, time.Duration) {
	p.attempts++
	ctx := p.ctx
	res, err := do(ctx, rec)
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		return true, 0
	case idem.ActionDeadLetter:
		return c.deadLetter(ctx, p, rec, idem.DeadLetterReason(err), err)
	}
	if ctx.Err() != nil {
		return false, 0 // lost, or drained on shutdown: the next owner retries
	}
	if res.Outcome == idem.OutcomeFailed {
		p.failures++
		if c.opts.MaxAttempts > 0 && p.failures >= c.opts.MaxAttempts {
			return c.deadLetter(ctx, p, rec, "retries_exhausted", err)
		}
	}
	return false, idem.RetryAfter(res, err, c.clock(), c.backoff(p.attempts))
}

// Dead-letter headers added to the original record's headers.
const (
	HeaderReason            = "idem-reason"
	HeaderError             = "idem-error"
	HeaderOriginalTopic     = "idem-original-topic"
	HeaderOriginalPartition = "idem-original-partition"
	HeaderOriginalOffset    = "idem-original-offset"
)

// maxErrorHeader bounds the idem-error header: error texts can embed whole
// payloads.
const maxErrorHeader = 1024

// deadLetter produces rec to the dead-letter topic and reports whether the
// broker acknowledged it; only then is the original record done. A failed
// produce holds the record for the attempt's back-off.
func (c *Consumer) deadLetter(ctx context.Context, p *partition, rec *kgo.Record, reason string, cause error) (bool, time.Duration) {
	dl := DeadLetter(c.opts.DeadLetterTopic, rec, reason, cause)
	if err := c.opts.Producer.ProduceSync(ctx, dl).FirstErr(); err != nil {
		c.reportError(&DeadLetterError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: reason, Err: err})
		return false, c.backoff(p.attempts)
	}
	if c.opts.OnDeadLetter != nil {
		c.opts.OnDeadLetter(rec, reason, cause)
	}
	return true, 0
}

// DeadLetter builds the dead letter of rec for topic: the same key, value
// and headers, with the idem-* headers describing why and where from
// (replacing idem-* headers of an earlier dead-lettering, so a replayed
// dead letter that fails again does not accumulate them).
func DeadLetter(topic string, rec *kgo.Record, reason string, cause error) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+5)
	for _, h := range rec.Headers {
		switch h.Key {
		case HeaderReason, HeaderError, HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset:
			continue
		}
		hs = append(hs, h)
	}
	msg := ""
	if cause != nil {
		msg = cause.Error()
		if len(msg) > maxErrorHeader {
			msg = strings.ToValidUTF8(msg[:maxErrorHeader], "")
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(msg)},
		kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderOriginalPartition, Value: itoa(int64(rec.Partition))},
		kgo.RecordHeader{Key: HeaderOriginalOffset, Value: itoa(rec.Offset)},
	)
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: hs}
}

func itoa(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
