package kafka

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// RecordOption adds to a record built by Record.
type RecordOption func(*kgo.Record)

// Record builds a record for topic whose idempotency-key header is id, the
// message's stable id: the same id on every send of the same logical message
// (an order id, an event id), never a fresh UUID per attempt. key is the
// Kafka partitioning key ("" for none); records with one key keep their
// order within one partition. The header carries the plain id, which the
// consumer's default key reads.
//
// Record sets no broker dedup id, because Kafka has none to set: nothing on
// the broker compares ids or content, so an id reused with other content is
// written, reaches the consumer and is dead-lettered there as a conflict.
//
// Keep the producer's own idempotence on as well (the kgo default; do not
// set kgo.DisableIdempotentWrite): it stops the broker from writing a
// retried batch twice within one producer session. It is a complement, not
// a replacement: it does not survive a producer restart, and it knows
// nothing of an application that sends the same message again. The
// consumer's key check covers those.
func Record(topic, key, id string, value []byte, opts ...RecordOption) *kgo.Record {
	r := &kgo.Record{
		Topic:   topic,
		Value:   value,
		Headers: []kgo.RecordHeader{{Key: DefaultKeyHeader, Value: []byte(id)}},
	}
	if key != "" {
		r.Key = []byte(key)
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// WithCloudEvent makes the record a CloudEvent in binary mode per the Kafka
// protocol binding: headers ce_specversion (1.0), ce_id (the record's id),
// ce_source and ce_type. Consume it with a guard whose idem.Options.Key is
// idem.CloudEventsKey, which keys on source and id together.
func WithCloudEvent(source, eventType string) RecordOption {
	return func(r *kgo.Record) {
		id := header(r, DefaultKeyHeader)
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: "ce_specversion", Value: []byte("1.0")},
			kgo.RecordHeader{Key: "ce_id", Value: []byte(id)},
			kgo.RecordHeader{Key: "ce_source", Value: []byte(source)},
			kgo.RecordHeader{Key: "ce_type", Value: []byte(eventType)},
		)
	}
}

// WithHeader adds a header.
func WithHeader(key, value string) RecordOption {
	return func(r *kgo.Record) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
	}
}

// header returns the first value of the named header of r.
func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}
