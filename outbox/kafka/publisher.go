// Package outboxkafka publishes an outbox to Kafka with franz-go: each
// record is produced to its Destination topic and confirmed by the
// broker's produce acknowledgement (the client's acks setting; the kgo
// default, all in-sync replicas, with the idempotent producer).
//
//	import outboxkafka "github.com/idemgo/idem/outbox/kafka"
//
//	pub, _ := outboxkafka.New(cl, outboxkafka.Options{})
//	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
//
// A record travels as broker/kafka's Record builds one, so the consumer side
// needs nothing of its own: the stable id in the idempotency-key header
// (kafka.DefaultKeyHeader), which kafka.MessageOf reads as
// idem.Message.ID. The Kafka key is the record's RoutingKey, else its
// OrderingKey, so one ordering key stays on one partition and the
// consumer sees its messages in the order the relay sent them.
//
// Kafka has no broker-side dedup that could drop an id reused with other
// content: every repeat reaches the consumer, whose guard skips the same
// content and dead-letters other content as a conflict.
//
// The broker's refusals of a record itself (MESSAGE_TOO_LARGE,
// INVALID_RECORD, CORRUPT_MESSAGE, an invalid topic name) are
// outbox.Reject'ed, so the relay parks the record; everything else (an
// unknown topic, leadership changes, timeouts) is retried. Give the client
// kgo.ProducerBatchMaxBytes no larger than the topics' max.message.bytes
// (the kgo default fits the broker's default): a batch the broker refuses
// for its size is produced again record by record, and a record over the
// client's limit is refused before it is sent.
package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/outbox"
)

// Options configure a Publisher. The zero value works.
type Options struct {
	// Header is the header carrying the stable id. Default
	// kafka.DefaultKeyHeader ("idempotency-key"), where kafka.MessageOf
	// looks.
	Header string
}

// Publisher is an outbox.Publisher on a franz-go client. It is safe for
// concurrent use.
type Publisher struct {
	cl   *kgo.Client
	opts Options
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a publisher producing through cl, a client the caller
// configures (seed brokers, acks, TLS) and closes.
func New(cl *kgo.Client, opts Options) (*Publisher, error) {
	if cl == nil {
		return nil, fmt.Errorf("%w: outboxkafka.New with a nil client", outbox.ErrInvalidOptions)
	}
	if opts.Header == "" {
		opts.Header = kafka.DefaultKeyHeader
	}
	return &Publisher{cl: cl, opts: opts}, nil
}

// Record is the Kafka record a record is produced as: its headers (sorted
// by name), the stable id in the id header, the key RoutingKey or
// OrderingKey.
func (p *Publisher) Record(r outbox.Record) *kgo.Record {
	kr := &kgo.Record{Topic: r.Destination, Value: r.Payload}
	if k := r.RoutingKey; k != "" {
		kr.Key = []byte(k)
	} else if k := r.OrderingKey; k != "" {
		kr.Key = []byte(k)
	}
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		if k != p.opts.Header {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	kr.Headers = make([]kgo.RecordHeader, 0, len(names)+1)
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: p.opts.Header, Value: []byte(r.ID)})
	for _, k := range names {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: k, Value: []byte(r.Headers[k])})
	}
	return kr
}

// Publish implements outbox.Publisher: every record is produced at once and
// every acknowledgement awaited, until ctx ends. Kafka refuses a whole
// batch for one record in it (MESSAGE_TOO_LARGE, INVALID_RECORD), so the
// records refused that way are produced again one by one, each alone in its
// batch: only the one that is refused alone is rejected. Kafka cannot
// schedule: a record with a NotBefore time gets an *outbox.ScheduleError
// (the relay parks it) and is not produced.
func (p *Publisher) Publish(ctx context.Context, recs []outbox.Record) []error {
	return outbox.Unscheduled("outboxkafka", recs, func(recs []outbox.Record) []error { return p.publish(ctx, recs) })
}

func (p *Publisher) publish(ctx context.Context, recs []outbox.Record) []error {
	errs := p.produce(ctx, recs)
	var suspects []int
	for i, err := range errs {
		if permanent(err) {
			suspects = append(suspects, i)
		}
	}
	if len(suspects) < 2 {
		return classified(recs, errs)
	}
	for _, i := range suspects {
		errs[i] = p.produce(ctx, recs[i:i+1])[0]
	}
	return classified(recs, errs)
}

// produce produces recs and returns the broker's answers (the client's
// errors as they are), ctx's error for those still waiting when it ends.
func (p *Publisher) produce(ctx context.Context, recs []outbox.Record) []error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(recs)) // late acknowledgements never block
	for i, r := range recs {
		p.cl.Produce(ctx, p.Record(r), func(_ *kgo.Record, err error) { results <- result{i, err} })
	}
	errs := make([]error, len(recs))
	done := make([]bool, len(recs))
	for range recs {
		select {
		case res := <-results:
			done[res.i], errs[res.i] = true, res.err
		case <-ctx.Done():
			for i := range recs {
				if !done[i] {
					errs[i] = ctx.Err()
				}
			}
			return errs
		}
	}
	return errs
}

func classified(recs []outbox.Record, errs []error) []error {
	for i, err := range errs {
		if err != nil {
			errs[i] = classify(recs[i], err)
		}
	}
	return errs
}

// permanent reports whether Kafka refused the record (or its batch) for
// good.
func permanent(err error) bool {
	if err == nil {
		return false
	}
	for _, p := range []error{kerr.MessageTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
		kerr.InvalidTopicException, kerr.RecordListTooLarge, kerr.InvalidTimestamp} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// classify names the record and rejects the errors that retrying cannot
// fix.
func classify(r outbox.Record, err error) error {
	err = fmt.Errorf("outboxkafka: produce %s to %s: %w", r.ID, r.Destination, err)
	if permanent(err) {
		return outbox.Reject(err)
	}
	return err
}
