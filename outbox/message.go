package outbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
)

// Message is one outgoing message, written by Enqueue in the caller's
// transaction and published by the Relay.
type Message struct {
	// ID is the message's stable id: the same on every publish of it, so
	// the consumer's idem guard removes the relay's own repeats. The
	// publishers put it where the consumer adapters' MessageOf reads it.
	// Leave it empty to have Enqueue derive it (see Prepare): inside an
	// idem handler from the inbound message's key, so a handler run again
	// enqueues the same ids.
	ID string
	// Destination is the Kafka topic, the NATS subject or the RabbitMQ
	// exchange. Required.
	Destination string
	// RoutingKey is the RabbitMQ routing key and the Kafka record key
	// (default: OrderingKey); NATS does not use it (the subject is the
	// destination).
	RoutingKey string
	// OrderingKey names a sequence (an aggregate id, an account): the
	// messages of one key are published in the order their transactions
	// committed, each only once the one before it is confirmed, and a
	// message that fails holds back only those behind it in its key.
	// Empty: no order with any other message.
	OrderingKey string
	// Headers travel with the message (Kafka headers, NATS headers, AMQP
	// headers). They are not part of the fingerprint (trace headers differ
	// between runs of one handler).
	Headers map[string]string
	// Payload is the body.
	Payload []byte
	// NotBefore, when set, is the earliest time the broker may deliver the
	// message: the publisher sends it at once as a scheduled message
	// (Service Bus's ScheduledEnqueueTime). A publisher whose broker cannot
	// schedule (Kafka, NATS, RabbitMQ) refuses it with a *ScheduleError
	// and the relay parks it: never delivered early. The relay publishes
	// it in its turn; the later messages of its ordering key follow once
	// it is confirmed, so they may be delivered before it. Stored at the
	// store's precision (milliseconds, microseconds on PostgreSQL); not
	// part of the fingerprint (a handler run again computes another time).
	NotBefore time.Time
}

// Record is a message as the outbox holds it.
type Record struct {
	Message
	// Seq orders the outbox: per ordering key, commit order.
	Seq int64
	// Fingerprint hashes destination, routing key, ordering key and payload
	// (see Fingerprint). An id enqueued again with the same fingerprint is
	// the same message; with another it is a conflict.
	Fingerprint string
	CreatedAt   time.Time
	// Attempts counts failed publishes.
	Attempts int
	// NextAttemptAt is when the relay may publish it (again).
	NextAttemptAt time.Time
	// LastError is the last publish failure, one line.
	LastError string
	// PublishedAt is when the broker confirmed it; zero while pending.
	PublishedAt time.Time
	// Parked is set for a message the broker rejected (ErrRejected), or
	// that failed RelayOptions.MaxAttempts times: it is not retried until
	// an operator says so (idem outbox retry), and it holds back the later
	// messages of its ordering key.
	Parked bool
}

// Pending reports whether the broker has not confirmed r yet.
func (r Record) Pending() bool { return r.PublishedAt.IsZero() }

// Field limits. Ids are idem keys (idem.MaxIDLen); the others fit every
// broker's and database's short-text limits (AMQP's shortstr is 255 bytes).
const (
	MaxIDLen    = idem.MaxIDLen
	MaxFieldLen = 255
)

// Defaults for Limits.
const (
	DefaultMaxPayload     = 1 << 20 // NATS's and Kafka's default maximum message
	DefaultMaxHeaderBytes = 64 << 10
)

// Limits bound what Enqueue takes. The zero value means the defaults.
type Limits struct {
	// MaxPayload is the largest payload in bytes. Default
	// DefaultMaxPayload (1 MiB); keep it at or below the broker's own
	// maximum, or oversized messages are parked when the relay reaches them
	// instead of refused when the handler enqueues them.
	MaxPayload int
	// MaxHeaderBytes bounds the headers' names and values together.
	// Default DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int
}

// Validate checks the limits (no negative values).
func (l Limits) Validate() error {
	if l.MaxPayload < 0 || l.MaxHeaderBytes < 0 {
		return fmt.Errorf("%w: negative Limits", ErrInvalidOptions)
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if l.MaxPayload <= 0 {
		l.MaxPayload = DefaultMaxPayload
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Prepare turns the messages of one Enqueue call into the records a store
// writes, created at now, or refuses them all with a *MessageError before
// anything is written. Stores call it first; it is exported for stores of
// other databases.
//
// A message without an ID gets one:
//
//   - when ctx carries an idem key (inside idem.DoTx, Guard.Do or a broker
//     adapter's handler), idem.DeriveKey(ctx, "outbox:"+Destination+"#"+n),
//     n counting this call's messages to that destination from 0. A handler
//     run again for the same inbound message (its first transaction rolled
//     back, or its lease ran out) enqueues the same ids, so the outbox, and
//     failing that the consumer, keeps one of each. Give the messages of a
//     handler that enqueues in several calls their own ids
//     (idem.DeriveKey(ctx, "order-charged")): two calls would derive the
//     same ones.
//   - otherwise a random id: stable from here on, so the relay's repeats
//     are still removed by the consumer.
func Prepare(ctx context.Context, now time.Time, lim Limits, msgs []Message) ([]Record, error) {
	lim = lim.withDefaults()
	key, keyed := idem.KeyFromContext(ctx)
	perDest := map[string]int{}
	ids := make(map[string]int, len(msgs))
	recs := make([]Record, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			if keyed {
				n := perDest[m.Destination]
				perDest[m.Destination] = n + 1
				m.ID = key.Derive("outbox:" + m.Destination + "#" + strconv.Itoa(n))
			} else {
				m.ID = "outbox-" + rand.Text()
			}
		}
		if err := lim.check(i, m); err != nil {
			return nil, err
		}
		if j, dup := ids[m.ID]; dup {
			return nil, &MessageError{Index: i, ID: m.ID, Err: ErrDuplicateID, Reason: fmt.Sprintf("message %d has this id too", j)}
		}
		ids[m.ID] = i
		m.Headers = maps.Clone(m.Headers)
		m.Payload = append([]byte(nil), m.Payload...)
		recs[i] = Record{Message: m, Fingerprint: Fingerprint(m), CreatedAt: now, NextAttemptAt: now}
	}
	return recs, nil
}

// Fingerprint hashes what makes two messages with one id the same message:
// destination, routing key, ordering key and payload (not the headers).
func Fingerprint(m Message) string {
	return idem.Fingerprint([]byte(m.Destination), []byte(m.RoutingKey), []byte(m.OrderingKey), m.Payload)
}

func (l Limits) check(i int, m Message) error {
	bad := func(err error, format string, args ...any) error {
		return &MessageError{Index: i, ID: m.ID, Err: err, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case strings.TrimSpace(m.ID) == "":
		return bad(ErrInvalidID, "the id is blank")
	case len(m.ID) > MaxIDLen:
		return bad(ErrInvalidID, "the id is %d bytes, limit %d", len(m.ID), MaxIDLen)
	case !isText(m.ID):
		return bad(ErrInvalidID, "the id is not text (invalid UTF-8, NUL, CR or LF)")
	case strings.TrimSpace(m.Destination) == "":
		return bad(ErrNoDestination, "set Destination to the topic, subject or exchange")
	case len(m.Payload) > l.MaxPayload:
		return bad(ErrPayloadTooLarge, "%d bytes, limit %d", len(m.Payload), l.MaxPayload)
	}
	for _, f := range []struct{ name, v string }{
		{"Destination", m.Destination}, {"RoutingKey", m.RoutingKey}, {"OrderingKey", m.OrderingKey},
	} {
		if len(f.v) > MaxFieldLen {
			return bad(ErrInvalidField, "%s is %d bytes, limit %d", f.name, len(f.v), MaxFieldLen)
		}
		if !isText(f.v) {
			return bad(ErrInvalidField, "%s is not text (invalid UTF-8, NUL, CR or LF)", f.name)
		}
	}
	size := 0
	for k, v := range m.Headers {
		size += len(k) + len(v)
		switch {
		case strings.TrimSpace(k) == "":
			return bad(ErrInvalidField, "a header has a blank name")
		case !isText(k) || strings.ContainsAny(k, " :"):
			return bad(ErrInvalidField, "header name %.40q is not a token (no spaces, colons, NUL, CR, LF)", k)
		case !isText(v):
			return bad(ErrInvalidField, "header %.40q: the value is not text (invalid UTF-8, NUL, CR or LF)", k)
		}
	}
	if size > l.MaxHeaderBytes {
		return bad(ErrHeadersTooLarge, "%d bytes, limit %d", size, l.MaxHeaderBytes)
	}
	return nil
}

// isText reports whether s is valid UTF-8 without NUL, CR or LF: what
// every broker's headers and every database's text columns carry.
func isText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsAny(s, "\x00\r\n")
}

// EncodeHeaders is the stored form of headers: a JSON object ("" for
// none). Stores share it so that every database holds the same text.
func EncodeHeaders(h map[string]string) string {
	if len(h) == 0 {
		return ""
	}
	b, _ := json.Marshal(h) // string to string: cannot fail
	return string(b)
}

// DecodeHeaders reads EncodeHeaders' text back.
func DecodeHeaders(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("outbox: stored headers: %w", err)
	}
	return h, nil
}

// OneLine makes a publish error fit Record.LastError: one line of valid
// UTF-8 of at most 1 KiB.
func OneLine(s string) string {
	s = strings.ToValidUTF8(strings.NewReplacer("\r", " ", "\n", " ", "\x00", " ").Replace(s), "?")
	const max = 1024
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
