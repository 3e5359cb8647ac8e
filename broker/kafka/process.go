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
		return c.deadLetter(ctx, p, rec, "", res, err)
	}
	if ctx.Err() != nil {
		return false, 0 // lost, or drained on shutdown: the next owner retries
	}
	if res.Outcome == idem.OutcomeFailed {
		p.failures++
		if c.opts.MaxAttempts > 0 && p.failures >= c.opts.MaxAttempts {
			return c.deadLetter(ctx, p, rec, ReasonRetriesExhausted, res, err)
		}
	}
	return false, idem.RetryAfter(res, err, c.clock(), c.backoff(p.attempts))
}

// ReasonRetriesExhausted is the idem.HeaderReason of a record dead-lettered
// after its handler failed Options.MaxAttempts times in a row.
const ReasonRetriesExhausted = "retries_exhausted"

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

// deadLetter produces rec to the dead-letter topic and reports whether the
// broker acknowledged it; only then is the original record done. A failed
// produce holds the record for the attempt's back-off.
func (c *Consumer) deadLetter(ctx context.Context, p *partition, rec *kgo.Record, reason string, res idem.Result, cause error) (bool, time.Duration) {
	dl := DeadLetter(c.opts.DeadLetterTopic, rec, reason, res, cause)
	if reason == "" {
		reason = idem.DeadLetterReason(cause)
	}
	if err := c.opts.Producer.ProduceSync(ctx, dl).FirstErr(); err != nil {
		c.reportError(&DeadLetterError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Reason: reason, Err: err})
		return false, c.backoff(p.attempts)
	}
	if c.opts.OnDeadLetter != nil {
		c.opts.OnDeadLetter(rec, reason, cause)
	}
	return true, 0
}

// DeadLetter builds the dead letter of rec for topic, for the call that
// returned (res, cause): the same key and value; first the headers of
// idem.DeadLetterHeaders(res, cause) (the reason, the error, the key, and
// for a conflict or a parked record the stored record's fingerprint, state,
// token, attempts and first-claim time beside this record's fingerprint)
// and the original topic, partition, offset and timestamp; then rec's own
// headers exactly as they were, in their order, repeats included. reason
// replaces idem.DeadLetterReason(cause) when not empty (as
// ReasonRetriesExhausted does).
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
