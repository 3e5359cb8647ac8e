// Package dlq reads and replays the dead letters idem's broker consumers
// wrote, one implementation per broker behind one interface, Queue: idem
// dlq, idem console and idem doctor use it. The broker a URL names is
// chosen by the CLI's table of drivers (cmd/idem's drivers.go), which
// holds each broker's Opener here.
//
//	q, err := dlq.OpenNATS(ctx, u, raw) // as the driver table does
//	defer q.Close()
//	dls, err := q.List(ctx, 100)
//	err = q.Replay(ctx, []string{dls[0].ID}, func(dl dlq.DeadLetter, err error) { ... })
//
// Replay goes through each adapter's own Replay, then removes the dead
// letter where the broker can: NATS deletes it from the stream, RabbitMQ
// acks it, Service Bus completes it, Redis Streams deletes the entry (in
// the adapter's MULTI), SQS deletes the message, Pub/Sub acks it and MQTT
// acks it in the dead-letter session. A Kafka topic cannot drop one
// record, nor an event hub one event, so a replayed Kafka or Event Hubs
// dead letter stays, and replaying it again is a duplicate to the
// consumer's record while the record lives.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemgo/idem"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrBadURL means the broker URL is not one this package reads.
	ErrBadURL = errors.New("bad broker URL")
	// ErrNotFound means no dead letter has the given id (replayed or
	// removed meanwhile, or never there).
	ErrNotFound = errors.New("no such dead letter")
	// ErrNotReadable means the broker does not let this package read a
	// setting (RabbitMQ's queue arguments over AMQP 0.9.1, Service Bus's
	// entity properties on an emulator without the administration API).
	ErrNotReadable = errors.New("broker setting not readable")
)

// DeadLetter is one dead letter as its broker holds it.
type DeadLetter struct {
	// ID names the dead letter for Replay: the NATS stream sequence, the
	// Kafka "partition/offset", the Event Hubs "partition/sequence
	// number" in the dead-letter hub, the Service Bus sequence number, or, on
	// RabbitMQ (which numbers no message), the dead-lettering consumer's
	// "consumer-tag/delivery-tag".
	ID string `json:"id"`
	// Reason is idem's Idem-Reason (conflict, permanent, max_deliver,
	// parked, ...), or the broker's own reason for one it dead-lettered
	// itself (Service Bus MaxDeliveryCountExceeded).
	Reason string `json:"reason"`
	// Error is the error text (Idem-Error).
	Error string `json:"error,omitempty"`
	// Key is the message's "scope/id" (Idem-Key); empty when it had none.
	Key string `json:"key,omitempty"`
	// Fingerprint is this message's content fingerprint (Idem-Fingerprint).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Source is where the original came from: subject, queue, topic or
	// entity.
	Source string `json:"source,omitempty"`
	// At is when the broker stored the dead letter (NATS, Kafka), or when
	// the original was (RabbitMQ's timestamp property, Service Bus's
	// enqueued time); zero when the broker does not say.
	At time.Time `json:"at,omitzero"`
	// Headers are all of the dead letter's headers, as text.
	Headers map[string]string `json:"headers"`
	// Body is the message's data.
	Body []byte `json:"body,omitempty"`
}

// Splits lists every (scope, id) split of the dead letter's Key at a
// slash, the first slash first: a scope such as NATS's "STREAM/consumer"
// holds one itself, so the record is found under one of them.
func (d DeadLetter) Splits() []idem.Key {
	var out []idem.Key
	for i := 0; i < len(d.Key); i++ {
		if d.Key[i] == '/' && i > 0 && i < len(d.Key)-1 {
			out = append(out, idem.Key{Scope: d.Key[:i], ID: d.Key[i+1:]})
		}
	}
	return out
}

// Queue is one broker's dead letters.
type Queue interface {
	// Name says which broker and dead-letter entity, password redacted.
	Name() string
	// List returns up to limit dead letters (all when limit <= 0), oldest
	// first, leaving each where it is.
	List(ctx context.Context, limit int) ([]DeadLetter, error)
	// Replay replays the dead letters named by ids through the adapter's
	// Replay, each one once, and removes it where the broker can (see the
	// package doc); done is called for each dead letter met, with Replay's
	// error or the removal's. Ids not met are not reported: the caller
	// compares. Dead letters written during the call (a conflict
	// dead-lettered again) are not met.
	Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error
	// Close releases the connection.
	Close() error
}

// Span is one setting of the broker that bounds how long a message can
// come back to a consumer: a redelivery budget, the time a message or a
// dead letter is kept.
type Span struct {
	// What names the setting and where it was read ("consumer ORDERS/billing:
	// MaxDeliver 5 × AckWait 30s").
	What string `json:"what"`
	// Duration is the span; meaningless when Unbounded.
	Duration time.Duration `json:"duration_ns"`
	// Unbounded means the setting sets no limit (a stream or queue that
	// keeps messages for ever).
	Unbounded bool `json:"unbounded"`
	// DeadLetters marks the time a dead letter is kept, the window a
	// replay can come in.
	DeadLetters bool `json:"dead_letters"`
	// Budget marks a redelivery budget (deliveries × the wait between
	// them): a message outside it is no longer redelivered by itself.
	Budget bool `json:"budget"`
}

// Horizoner is implemented by the queues that can read the broker's
// settings that bound redelivery (idem doctor compares them with the
// store's retention). Settings it cannot read are returned as notes
// wrapping ErrNotReadable beside the spans it read.
type Horizoner interface {
	Horizon(ctx context.Context) (spans []Span, notes []error, err error)
}

// Opener opens one broker's dead letters from its URL (raw, as given;
// u, raw parsed, nil for a Service Bus or Event Hubs connection string). A bad URL is
// an error wrapping ErrBadURL.
type Opener func(ctx context.Context, u *url.URL, raw string) (Queue, error)

// Redact hides a URL's password and a connection string's key (Service
// Bus's, or Event Hubs' after EventHubsPrefix).
func Redact(raw string) string {
	if len(raw) >= len(EventHubsPrefix) && strings.EqualFold(raw[:len(EventHubsPrefix)], EventHubsPrefix) {
		return raw[:len(EventHubsPrefix)] + Redact(raw[len(EventHubsPrefix):])
	}
	if strings.HasPrefix(strings.ToLower(raw), "endpoint=") {
		parts := strings.Split(raw, ";")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok && strings.EqualFold(k, "SharedAccessKey") {
				parts[i] = k + "=xxxxx"
			}
		}
		return strings.Join(parts, ";")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// cutKeys takes the named keys (in lower case; matched in any case) out
// of a connection string: their values, and the string without them.
func cutKeys(conn string, keys ...string) (map[string]string, string) {
	vals := map[string]string{}
	var kept []string
	for _, p := range strings.Split(conn, ";") {
		k, v, _ := strings.Cut(p, "=")
		if k = strings.ToLower(strings.TrimSpace(k)); slices.Contains(keys, k) {
			vals[k] = strings.TrimSpace(v)
			continue
		}
		kept = append(kept, p)
	}
	return vals, strings.Join(kept, ";")
}

// param is the URL's query parameter name, required or not.
func param(u *url.URL, name string, required bool) (string, error) {
	v := u.Query().Get(name)
	if v == "" && required {
		return "", fmt.Errorf("%w: %s needs ?%s= (the dead-letter entity; see idem dlq --help)", ErrBadURL, u.Redacted(), name)
	}
	return v, nil
}

// deadLetterOf fills a DeadLetter's idem fields from its headers.
func deadLetterOf(id string, h map[string]string, body []byte) DeadLetter {
	return DeadLetter{
		ID: id, Reason: h[idem.HeaderReason], Error: h[idem.HeaderError], Key: h[idem.HeaderDeadLetterKey],
		Fingerprint: h[idem.HeaderFingerprint], Headers: h, Body: body,
	}
}

// idSet is ids as a set.
func idSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
