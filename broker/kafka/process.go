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
	if len(rec.Headers) > 0 {
		m.Headers = make(map[string]string, len(rec.Headers))
		for _, h := range rec.Headers {
			if _, ok := m.Headers[h.Key]; !ok {
				m.Headers[h.Key] = string(h.Value)
			}
		}
		m.ID = m.Headers[DefaultKeyHeader]
		m.ContentType = m.Header("content-type")
	}
	return m
}

// Key returns the key the consumer stores for rec: the guard's key function
// applied to MessageOf(rec), in the guard's scope, validated.
func (c *Consumer) Key(rec *kgo.Record) (idem.Key, error) {
	return c.g.Key(MessageOf(rec))
}

// process runs the head record of p through the guard and acts on the
// outcome: the Report of the attempt, and whether the record is done
// (processed, a duplicate, or dead-lettered with the dead letter
// acknowledged). A record that is not done holds its partition for
// r.Delay: for a key in progress elsewhere until the holder's lease ends,
// plus jitter (idem.RetryAfter), so that the retry finds the key completed
// (a duplicate), renewed (held again) or orphaned (retaken as stale); for
// everything else the attempt's back-off. BeforeSettle runs once the
// outcome is known, before any of that.
func (c *Consumer) process(p *partition, rec *kgo.Record) (broker.Report, bool) {
	p.attempts++
	ctx := p.ctx
	res, err := c.handle(p, rec)
	r := broker.Decide(res, err, c.clock(), p.attempts, c.backoff)
	if r.Action == idem.ActionRetry && ctx.Err() == nil && res.Outcome == idem.OutcomeFailed {
		// A failure caused by a cancelled context (a loss, a drain that
		// timed out) is not the record's: the next owner retries it.
		p.failures++
		if c.opts.MaxAttempts > 0 && p.failures >= c.opts.MaxAttempts {
			r.Action, r.Reason, r.Delay = idem.ActionDeadLetter, broker.ReasonMaxDeliver, 0
		}
	}
	c.opts.Hooks.CallBeforeSettle(ctx, rec, r)
	done := false
	switch r.Action {
	case idem.ActionAck:
		done = true
	case idem.ActionDeadLetter:
		r, done = c.deadLetter(ctx, p, rec, r)
		if done && c.h.cp != nil {
			c.passCheckpoint(p, rec)
		}
	}
	if !done {
		// Held: the claims made ahead for the records behind it would
		// neither run before it nor keep their keys meanwhile.
		p.releaseAhead()
	}
	return r, done
}

// handle runs the consumer's handler for rec: under the ticket of the
// partition's batch when the consumer claims in batches, else claiming rec
// on its own.
func (c *Consumer) handle(p *partition, rec *kgo.Record) (idem.Result, error) {
	switch {
	case c.h.cp != nil:
		return c.h.cp.run(p.ctx, c.g, rec)
	case c.batch:
		return c.runAhead(p, rec)
	}
	return c.h.h.Run(p.ctx, c.g, MessageOf(rec), rec)
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

// deadLetter produces rec to the dead-letter topic; only once the broker
// acknowledged it is the original record done. A failed produce is the
// report's BrokerErr and holds the record for the attempt's back-off.
func (c *Consumer) deadLetter(ctx context.Context, p *partition, rec *kgo.Record, r broker.Report) (broker.Report, bool) {
	dl := DeadLetter(c.opts.DeadLetterTopic, rec, r.Reason, r.Result, r.Err)
	pctx, cancel := context.WithTimeout(ctx, c.opts.DeadLetterTimeout)
	err := c.opts.Producer.ProduceSync(pctx, dl).FirstErr()
	cancel()
	if err != nil {
		r.BrokerErr = err
		r.Delay = c.backoff(p.attempts)
		c.reportError(&DeadLetterError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: r.Reason, Err: err})
		return r, false
	}
	c.opts.Hooks.CallOnDeadLetter(ctx, rec, r)
	return r, true
}

// DeadLetter builds the dead letter of rec for topic, for the call that
// returned (res, cause): the same key and value; first the headers of
// idem.DeadLetterHeaders(res, cause) (the reason, the error, the key, and
// for a conflict or a parked record the stored record's fingerprint, state,
// token, attempts and first-claim time beside this record's fingerprint)
// and the original topic, partition, offset and timestamp; then rec's own
// headers exactly as they were, in their order, repeats included. reason
// replaces idem.DeadLetterReason(cause) when not empty (as
// broker.ReasonMaxDeliver does).
//
// A replayed dead letter that is dead-lettered again keeps its earlier idem
// headers among the original ones, after the new: the first value of a
// header is this dead-lettering's.
func DeadLetter(topic string, rec *kgo.Record, reason string, res idem.Result, cause error) *kgo.Record {
	h := idem.DeadLetterHeaders(res, cause)
	if reason != "" {
		h[idem.HeaderReason] = reason
	}
	hs := make([]kgo.RecordHeader, 0, len(h)+4+len(rec.Headers))
	for _, k := range deadLetterOrder {
		if v, ok := h[k]; ok {
			if k == idem.HeaderError {
				v = strings.ToValidUTF8(v, "") // cut at 1 KiB, maybe inside a rune
			}
			hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			delete(h, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h)) { // any the root adds later
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

// deadLetterOrder is the order of the idem headers on a dead letter: why,
// then whose, then the stored record beside the message.
var deadLetterOrder = []string{
	idem.HeaderReason, idem.HeaderError, idem.HeaderDeadLetterKey, idem.HeaderFingerprint,
	idem.HeaderStoredFingerprint, idem.HeaderStoredState, idem.HeaderStoredCreatedAt,
	idem.HeaderStoredAttempts, idem.HeaderStoredToken,
}

func itoa(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
