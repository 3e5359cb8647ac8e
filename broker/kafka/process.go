package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
)

// mode names the events the consumer reports itself (records without a
// usable key); the guard reports the others as "two-phase" or "tx".
const mode = "kafka"

// Message converts a record into what the guard reads: headers (the first
// value wins when a header repeats), the value as payload, and the
// content-type header (set by the CloudEvents Kafka binding in structured
// mode). ID stays empty: Kafka has no producer-assigned message id, and the
// offset is not one (a producer retry writes the same message at a new
// offset).
func Message(rec *kgo.Record) idem.Message {
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
	return c.key(Message(rec))
}

func (c *Consumer) key(m idem.Message) (idem.Key, error) {
	k := idem.Key{Scope: c.opts.Scope}
	id, err := c.opts.Key(m)
	if err != nil {
		if !errors.Is(err, idem.ErrNoKey) && !errors.Is(err, idem.ErrInvalidKey) {
			err = &idem.KeyError{Reason: err.Error(), Err: idem.ErrInvalidKey}
		}
		return k, err
	}
	k.ID = id
	return k, k.Validate()
}

// process runs one record through the guard and acts on the outcome. It
// reports whether the record is done: processed, a duplicate, or
// dead-lettered with the dead letter acknowledged.
func (c *Consumer) process(p *partition, rec *kgo.Record, keyed keyedFunc, unkeyed unkeyedFunc) bool {
	p.attempts++
	ctx := p.ctx
	msg := Message(rec)
	res, err := c.handle(ctx, msg, rec, keyed, unkeyed)
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		return true
	case idem.ActionDeadLetter:
		return c.deadLetter(ctx, rec, idem.DeadLetterReason(err), err)
	}
	if ctx.Err() != nil {
		return false // lost, or drained on shutdown: the next owner retries
	}
	if res.Outcome == idem.OutcomeFailed {
		p.failures++
		if c.opts.MaxAttempts > 0 && p.failures >= c.opts.MaxAttempts {
			return c.deadLetter(ctx, rec, "retries_exhausted", err)
		}
	}
	return false
}

func (c *Consumer) handle(ctx context.Context, msg idem.Message, rec *kgo.Record, keyed keyedFunc, unkeyed unkeyedFunc) (idem.Result, error) {
	start := time.Now()
	key, err := c.key(msg)
	if err == nil {
		var fp string
		if fp, err = c.g.Fingerprint(msg); err == nil {
			return keyed(ctx, key, fp, rec)
		}
	}
	gopts := c.g.Options()
	if errors.Is(err, idem.ErrNoKey) && gopts.MissingKey == idem.MissingKeyProcess {
		hs := time.Now()
		v, herr := unkeyed(ctx, rec)
		res := idem.Result{Outcome: idem.OutcomeUnkeyed, Key: key, Value: v}
		if herr != nil {
			res.Outcome = idem.OutcomeFailed
			if idem.IsPermanent(herr) {
				res.Outcome = idem.OutcomePermanent
			}
		}
		c.observe(ctx, idem.Event{Key: key, Mode: mode, Outcome: res.Outcome, Err: herr,
			Handler: time.Since(hs), Total: time.Since(start)})
		return res, herr
	}
	c.observe(ctx, idem.Event{Key: key, Mode: mode, Outcome: idem.OutcomeNoKey, Err: err, Total: time.Since(start)})
	return idem.Result{Outcome: idem.OutcomeNoKey, Key: key}, err
}

func (c *Consumer) observe(ctx context.Context, e idem.Event) {
	if o := c.g.Options().Observer; o != nil {
		o.Observe(ctx, e)
	}
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
// broker acknowledged it; only then is the original record done.
func (c *Consumer) deadLetter(ctx context.Context, rec *kgo.Record, reason string, cause error) bool {
	dl := DeadLetter(c.opts.DeadLetterTopic, rec, reason, cause)
	if err := c.opts.Producer.ProduceSync(ctx, dl).FirstErr(); err != nil {
		c.reportError(&DeadLetterError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: reason, Err: err})
		return false
	}
	if c.opts.OnDeadLetter != nil {
		c.opts.OnDeadLetter(rec, reason, cause)
	}
	return true
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
