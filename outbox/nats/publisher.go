// Package outboxnats publishes an outbox to NATS JetStream: each record is
// published to its Destination subject, asynchronously, and confirmed by
// the stream's PubAck.
//
//	import outboxnats "github.com/idemgo/idem/outbox/nats"
//
//	pub, _ := outboxnats.New(js, outboxnats.Options{})
//	relay, _ := outbox.NewRelay(ob, pub, outbox.RelayOptions{})
//
// A record travels as broker/nats's Publish sends a message, so the
// consumer side needs nothing of its own: the stable id in the Idem-Id
// header (natsidem.HeaderID), which natsidem.MessageOf reads as
// idem.Message.ID, and Nats-Msg-Id set to idem.DedupID(id, fingerprint).
// JetStream's duplicate window therefore drops a repeat of the same content
// (the relay publishing again after a crash between the PubAck and its
// mark), but never an id reused with other content: that one reaches the
// consumer, whose guard dead-letters it as a conflict.
//
// The stream's refusals of a message itself (JetStream API errors with
// status 400: too large for the stream, a header it rejects) and the
// client's (over the server's max_payload, a malformed subject) are
// outbox.Reject'ed, so the relay parks the record; everything else (no
// stream for the subject, a timeout, a disconnection) is retried.
//
// Records are published asynchronously, a relay batch's wave at once: give
// the JetStream context an async window (jetstream.WithPublishAsyncMaxPending,
// default 4000) no smaller than the relay's BatchSize.
package outboxnats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/outbox"
)

// Options configure a Publisher. The zero value works.
type Options struct {
	// Fingerprint computes the content digest in Nats-Msg-Id. It sees the
	// message as a consumer's guard does (natsidem.MessageOf: the id, the
	// headers and the data). Give it the consumers' idem.Options.Fingerprint
	// when that is not the default, idem.PayloadFingerprint: a coarser one
	// would let the duplicate window drop content they tell apart.
	Fingerprint idem.FingerprintFunc
	// PublishOpts are passed to every publish (jetstream.WithExpectStream,
	// ...).
	PublishOpts []jetstream.PublishOpt
}

// Publisher is an outbox.Publisher on JetStream. It is safe for concurrent
// use.
type Publisher struct {
	js   jetstream.JetStream
	opts Options
}

var _ outbox.Publisher = (*Publisher)(nil)

// New returns a publisher on js.
func New(js jetstream.JetStream, opts Options) (*Publisher, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: outboxnats.New with a nil JetStream", outbox.ErrInvalidOptions)
	}
	if opts.Fingerprint == nil {
		opts.Fingerprint = idem.PayloadFingerprint
	}
	return &Publisher{js: js, opts: opts}, nil
}

// Msg is the NATS message a record is published as: its headers, the
// stable id in Idem-Id and the dedup id in Nats-Msg-Id.
func (p *Publisher) Msg(r outbox.Record) (*nats.Msg, error) {
	m := nats.NewMsg(r.Destination)
	m.Data = r.Payload
	for k, v := range r.Headers {
		m.Header.Set(k, v)
	}
	m.Header.Set(natsidem.HeaderID, r.ID)
	fp, err := p.opts.Fingerprint(consumerView(r, m.Header))
	if err != nil {
		return nil, fmt.Errorf("outboxnats: fingerprint of %s: %w", r.ID, err)
	}
	m.Header.Set(jetstream.MsgIDHeader, idem.DedupID(r.ID, fp))
	return m, nil
}

// consumerView is the idem.Message natsidem.MessageOf builds from the
// message: first header values, the plain id under Nats-Msg-Id too.
func consumerView(r outbox.Record, h nats.Header) idem.Message {
	im := idem.Message{ID: r.ID, Payload: r.Payload, Headers: make(map[string]string, len(h)+1)}
	for k, v := range h {
		if len(v) > 0 {
			im.Headers[k] = v[0]
		}
	}
	im.Headers[jetstream.MsgIDHeader] = r.ID
	im.ContentType = im.Header("Content-Type")
	return im
}

// Publish implements outbox.Publisher: every record is sent with
// PublishMsgAsync, then every PubAck is awaited. A record with a
// NotBefore time gets an *outbox.ScheduleError (the relay parks it) and is
// not published: JetStream does not schedule this way.
func (p *Publisher) Publish(ctx context.Context, recs []outbox.Record) []error {
	return outbox.Unscheduled("outboxnats", recs, func(recs []outbox.Record) []error { return p.publish(ctx, recs) })
}

func (p *Publisher) publish(ctx context.Context, recs []outbox.Record) []error {
	errs := make([]error, len(recs))
	futures := make([]jetstream.PubAckFuture, len(recs))
	for i, r := range recs {
		m, err := p.Msg(r)
		if err != nil {
			errs[i] = outbox.Reject(err)
			continue
		}
		futures[i], err = p.js.PublishMsgAsync(m, p.opts.PublishOpts...)
		if err != nil {
			errs[i] = classify(r, err)
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = classify(recs[i], err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("outboxnats: publish %s to %s: %w", recs[i].ID, recs[i].Destination, ctx.Err())
		}
	}
	return errs
}

// classify names the record and rejects the errors that retrying cannot
// fix.
func classify(r outbox.Record, err error) error {
	err = fmt.Errorf("outboxnats: publish %s to %s: %w", r.ID, r.Destination, err)
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && api.Code == 400,
		errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrBadHeaderMsg):
		return outbox.Reject(err)
	}
	return err
}
