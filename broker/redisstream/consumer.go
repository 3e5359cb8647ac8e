package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Entry fields MessageOf reads, and those a dead letter carries beside
// idem's own (broker.DeadLetterHeaders: idem.HeaderReason,
// idem.HeaderError, idem.HeaderDeadLetterKey, idem.HeaderFingerprint and
// the idem.HeaderStored* fields).
const (
	FieldID      = "Idem-Id" // the producer's message id
	FieldPayload = "payload" // the body
	// FieldPosition is the original entry's id in its stream.
	FieldPosition   = "Idem-Original-Position"
	FieldStream     = "Idem-Original-Stream"
	FieldGroup      = "Idem-Group"      // the consumer group that dead-lettered it
	FieldDeliveries = "Idem-Deliveries" // the group's delivery count of the entry
)

// Message is one delivery of a stream entry to a consumer of the group.
type Message struct {
	Stream string
	redis.XMessage
	// Deliveries is the group's delivery count of the entry (1 for its
	// first delivery; XAUTOCLAIM counts one more).
	Deliveries int
}

// MessageOf is what the guard reads of an entry: ID from its Idem-Id
// field, Payload from its payload field, the other fields as Headers. The
// entry id is not the message's: a producer's retry is another entry.
func MessageOf(m *Message) idem.Message {
	im := idem.Message{Headers: make(map[string]string, len(m.Values))}
	for k, v := range m.Values {
		s := fmt.Sprint(v)
		switch k {
		case FieldID:
			im.ID = s
		case FieldPayload:
			im.Payload = []byte(s)
		default:
			im.Headers[k] = s
		}
	}
	im.ContentType = im.Header("Content-Type")
	return im
}

// Options configure a Consumer. Stream, Group, Consumer and
// DeadLetterStream are required.
type Options struct {
	// Concurrency is how many entries are handled at once (broker.Options).
	// Default 1.
	Concurrency int
	// Backoff is a retried entry's delay and a held entry's claim pace
	// (broker.Options).
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long an entry whose key is in progress elsewhere is
	// held (broker.Options).
	MaxHold time.Duration
	// MaxDeliveries is the handler failures before a max_deliver dead letter:
	// the record's attempts in two-phase mode, the group's delivery count in
	// the inbox (broker.Options). Zero: no limit (Redis never drops an entry).
	MaxDeliveries int
	// ShutdownTimeout bounds Run's wait for in-flight handlers
	// (broker.Options). Default 30s.
	ShutdownTimeout time.Duration
	// Hooks are the user's places in each entry's flow (broker.Options).
	Hooks broker.Hooks[*Message]

	Stream   string // the stream consumed
	Group    string // the consumer group, created at the stream's start ("0") when missing
	Consumer string // this consumer's name in the group: unique per process
	// DeadLetterStream receives conflicts, permanent failures, entries
	// without a usable key, parked records and entries that failed
	// MaxDeliveries times, each with its fields and idem's.
	DeadLetterStream string
	// MinIdle is how long an entry stays pending with a consumer, unacked
	// and not kept alive, before another consumer claims it (XAUTOCLAIM):
	// the time a crashed consumer's entries wait. Entries being handled or
	// held are kept alive (XCLAIM JUSTID every MinIdle/3). Default 30s.
	MinIdle time.Duration
	// Block bounds each XREADGROUP's wait for new entries, and so how late
	// an idle entry is claimed. Default 1s.
	Block time.Duration
}

// engine fills the defaults of o's engine options and returns them as the
// engine's (broker.Options.Fill: its checks, its errors).
func (o *Options) engine() (broker.Options[*Message], error) {
	e := broker.Options[*Message]{
		Concurrency:     o.Concurrency,
		Backoff:         o.Backoff,
		MaxHold:         o.MaxHold,
		MaxDeliveries:   o.MaxDeliveries,
		ShutdownTimeout: o.ShutdownTimeout,
		Hooks:           o.Hooks,
	}
	err := e.Fill()
	o.Concurrency, o.Backoff, o.MaxHold, o.ShutdownTimeout = e.Concurrency, e.Backoff, e.MaxHold, e.ShutdownTimeout
	return e, err
}

// Defaults of Options.
const (
	DefaultMinIdle = 30 * time.Second
	DefaultBlock   = time.Second
)

// Consumer runs a Handler for the entries of a Redis stream read by a
// consumer group, on idem's consumer engine (broker.Consumer).
type Consumer struct {
	t   *transport
	eng *broker.Consumer[*Message]
}

// Handler is the work a Consumer runs for each entry: Handle (two-phase)
// or HandleTx (transactional inbox).
type Handler = broker.Handler[*Message]

// NewConsumer returns a consumer of opts.Stream in opts.Group running h
// under g. Everything is checked here: a nil client, guard or handler, a
// missing Stream, Group, Consumer or DeadLetterStream, a dead-letter
// stream that is the stream itself, and negative options are refused with
// an error wrapping idem.ErrInvalidOptions.
func NewConsumer(rdb redis.UniversalClient, g *idem.Guard, h Handler, opts Options) (*Consumer, error) {
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: redisstream: nil client", idem.ErrInvalidOptions)
	case opts.Stream == "" || opts.Group == "" || opts.Consumer == "":
		return nil, fmt.Errorf("%w: redisstream: Options.Stream, Group and Consumer are required", idem.ErrInvalidOptions)
	case opts.DeadLetterStream == "" || opts.DeadLetterStream == opts.Stream:
		return nil, fmt.Errorf("%w: redisstream: Options.DeadLetterStream is required and not the stream itself (conflicts are never dropped silently)", idem.ErrInvalidOptions)
	case opts.MinIdle < 0 || opts.Block < 0:
		return nil, fmt.Errorf("%w: redisstream: negative MinIdle or Block", idem.ErrInvalidOptions)
	}
	if opts.MinIdle == 0 {
		opts.MinIdle = DefaultMinIdle
	}
	if opts.Block == 0 {
		opts.Block = DefaultBlock
	}
	t := &transport{rdb: rdb, opts: opts, cursor: "0-0"}
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	eng, err := broker.NewConsumer[*Message](t, g, h, eo)
	if err != nil {
		return nil, err
	}
	return &Consumer{t: t, eng: eng}, nil
}

// Run reads and handles entries until ctx ends, then shuts down gracefully
// (broker.Consumer.Run: held and unstarted entries are handed back, made
// claimable at once). It creates the group at the stream's start when it
// does not exist, and returns an error wrapping broker.ErrClosed when the
// client is closed.
func (c *Consumer) Run(ctx context.Context) error {
	err := c.t.rdb.XGroupCreateMkStream(ctx, c.t.opts.Stream, c.t.opts.Group, "0").Err()
	switch {
	case err == nil, strings.HasPrefix(err.Error(), "BUSYGROUP"):
	case ctx.Err() != nil:
		return nil // stopped before it started
	default:
		return fmt.Errorf("redisstream: create group %s on %s: %w", c.t.opts.Group, c.t.opts.Stream, err)
	}
	return c.eng.Run(ctx)
}

// Process handles one entry and settles it (for programs that read the
// stream themselves); Run does the same for every entry.
func (c *Consumer) Process(ctx context.Context, m *Message) broker.Report {
	return c.eng.Process(ctx, m)
}

// transport moves stream entries for the engine. An entry is read with
// XREADGROUP and stays pending with this consumer until XACK; a retry makes
// it idle (XCLAIM IDLE) so that it is claimed by XAUTOCLAIM, by any consumer
// of the group, once its delay has passed (the claim counts a delivery);
// an entry whose consumer died is claimed once it has been idle MinIdle.
type transport struct {
	rdb  redis.UniversalClient
	opts Options

	mu        sync.Mutex
	cursor    string    // XAUTOCLAIM's cursor
	lastClaim time.Time // the last XAUTOCLAIM
	due       time.Time // the earliest retry this consumer handed back
}

// Receive claims idle entries first (every MinIdle/4, or once a retry
// handed back is due), then reads new ones, blocking at most Block.
func (t *transport) Receive(ctx context.Context, n int) ([]*Message, error) {
	o := t.opts
	t.mu.Lock()
	now := time.Now()
	claim := now.Sub(t.lastClaim) >= o.MinIdle/4 || (!t.due.IsZero() && !now.Before(t.due))
	block := o.Block
	if !t.due.IsZero() {
		block = max(min(block, time.Until(t.due)), time.Millisecond)
	}
	cursor := t.cursor
	t.mu.Unlock()
	if claim {
		msgs, next, err := t.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: o.Stream, Group: o.Group, Consumer: o.Consumer,
			MinIdle: o.MinIdle, Start: cursor, Count: int64(n)}).Result()
		if err != nil {
			return nil, t.closed(err)
		}
		t.mu.Lock()
		t.lastClaim, t.cursor = now, next
		if next == "0-0" && len(msgs) == 0 {
			t.due = time.Time{}
		}
		t.mu.Unlock()
		if len(msgs) > 0 {
			return t.counted(ctx, msgs)
		}
	}
	res, err := t.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: o.Group, Consumer: o.Consumer,
		Streams: []string{o.Stream, ">"}, Count: int64(n), Block: block}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, t.closed(err)
	}
	var out []*Message
	for _, s := range res {
		for _, m := range s.Messages {
			out = append(out, &Message{Stream: o.Stream, XMessage: m, Deliveries: 1})
		}
	}
	return out, nil
}

// counted gives claimed entries their delivery counts (XPENDING).
func (t *transport) counted(ctx context.Context, msgs []redis.XMessage) ([]*Message, error) {
	o := t.opts
	pend, err := t.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: o.Stream, Group: o.Group, Consumer: o.Consumer,
		Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)) + 64, Idle: -1}).Result()
	if err != nil {
		return nil, t.closed(err)
	}
	counts := make(map[string]int64, len(pend))
	for _, p := range pend {
		counts[p.ID] = p.RetryCount
	}
	out := make([]*Message, len(msgs))
	for i, m := range msgs {
		out[i] = &Message{Stream: o.Stream, XMessage: m, Deliveries: int(max(counts[m.ID], 1))}
	}
	return out, nil
}

// closed wraps a closed client's error in broker.ErrClosed.
func (t *transport) closed(err error) error {
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("%w: redisstream: %w", broker.ErrClosed, err)
	}
	return err
}

func (t *transport) Message(m *Message) idem.Message { return MessageOf(m) }

func (t *transport) Delivery(m *Message) broker.Delivery {
	return broker.Delivery{Attempt: max(m.Deliveries, 1)}
}

func (t *transport) Ack(ctx context.Context, m *Message) error {
	return t.rdb.XAck(ctx, t.opts.Stream, t.opts.Group, m.ID).Err()
}

// keepScript resets the idle time of an entry pending with this consumer
// (ARGV[3] is the idle time to set, in ms), without counting a delivery,
// and reports 0 when another consumer has claimed it meanwhile.
var keepScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[4], ARGV[4], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[4], 'IDLE', ARGV[3], 'JUSTID')
return 1`)

// idle sets m's idle time, if it is still this consumer's.
func (t *transport) idle(ctx context.Context, m *Message, idle time.Duration) error {
	n, err := keepScript.Run(ctx, t.rdb, []string{t.opts.Stream}, t.opts.Group, t.opts.Consumer, idle.Milliseconds(), m.ID).Int()
	switch {
	case err != nil:
		return t.closed(err)
	case n == 0:
		return fmt.Errorf("%w: redisstream: entry %s claimed by another consumer", broker.ErrLockLost, m.ID)
	}
	return nil
}

// Retry leaves the entry pending, idle for MinIdle less delay: XAUTOCLAIM
// (this consumer's or another's) takes it once delay has passed.
func (t *transport) Retry(ctx context.Context, m *Message, delay time.Duration) error {
	delay = min(max(delay, 0), t.opts.MinIdle)
	if err := t.idle(ctx, m, t.opts.MinIdle-delay); err != nil {
		return err
	}
	due := time.Now().Add(delay)
	t.mu.Lock()
	if t.due.IsZero() || due.Before(t.due) {
		t.due = due
	}
	t.mu.Unlock()
	return nil
}

// KeepAlive resets the entry's idle time, so no other consumer claims it
// while it is handled or held; ErrLockLost when one has.
func (t *transport) KeepAlive(ctx context.Context, m *Message) error { return t.idle(ctx, m, 0) }

// KeepAliveEvery is a third of MinIdle.
func (t *transport) KeepAliveEvery(*Message) time.Duration { return t.opts.MinIdle / 3 }

// DeadLetter adds the entry, its fields, idem's and its position, to the
// dead-letter stream and acks the original, in one MULTI: both or neither.
func (t *transport) DeadLetter(ctx context.Context, m *Message, d broker.DeadLetter) error {
	vals := make(map[string]any, len(m.Values)+len(d.Headers)+4)
	for k, v := range m.Values {
		vals[k] = v
	}
	for k, v := range d.Headers {
		vals[k] = v
	}
	vals[FieldStream], vals[FieldPosition], vals[FieldGroup] = t.opts.Stream, m.ID, t.opts.Group
	vals[FieldDeliveries] = d.Attempt
	_, err := t.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: t.opts.DeadLetterStream, Values: vals})
		p.XAck(ctx, t.opts.Stream, t.opts.Group, m.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstream: dead letter to %s: %w", t.opts.DeadLetterStream, t.closed(err))
	}
	return nil
}
