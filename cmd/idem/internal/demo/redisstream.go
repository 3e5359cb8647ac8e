package demo

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/broker/redisstream"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// RedisStreams is Redis Streams on the user's Redis (Config.Broker, a
// redis:// or rediss:// URL): a stream of the run's orders read by a
// consumer group per side, each consumer process a member under a name of
// its own, and a dead-letter stream, deleted afterwards. A crashed
// consumer's entries stay pending until they have been idle AckWait, then
// another member claims them (XAUTOCLAIM); a retry sets an entry's idle
// time so that it is claimable once the delay has passed.
var RedisStreams = &Broker{name: "redisstream", url: true, start: func(ctx context.Context, cfg Config, runID string) (transport, error) {
	return startRedisStreams(ctx, cfg, runID)
}}

type redisBroker struct {
	rdb         *redis.Client
	label       string
	stream, dlq string
	ackWait     time.Duration
	sessions    atomic.Int64 // names consumer processes
}

func startRedisStreams(ctx context.Context, cfg Config, runID string) (_ *redisBroker, err error) {
	label := "Redis Streams at " + dsn.Redact(cfg.Broker)
	opts, err := redis.ParseURL(cfg.Broker)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, label, err)
	}
	opts.ClientName = "idem-demo"
	b := &redisBroker{rdb: redis.NewClient(opts), label: label, stream: "idem-demo:" + runID + ":orders", dlq: "idem-demo:" + runID + ":dlq", ackWait: cfg.AckWait}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	for _, group := range []string{"idem", "naive"} {
		if err := b.rdb.XGroupCreateMkStream(ctx, b.stream, group, "0").Err(); err != nil {
			if strings.Contains(strings.ToUpper(err.Error()), "NOAUTH") || strings.Contains(strings.ToUpper(err.Error()), "WRONGPASS") {
				return nil, fmt.Errorf("%w: %s: %v (check the user and password in the URL)", ErrBrokerAuth, label, err)
			}
			return nil, fmt.Errorf("%w: %s: create consumer group %s: %v (is it running?)", ErrBroker, label, group, err)
		}
	}
	return b, nil
}

func (b *redisBroker) name() string         { return b.label }
func (b *redisBroker) lostAckCrashes() bool { return false }

func (b *redisBroker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.rdb.Del(ctx, b.stream, b.dlq)
	b.rdb.Close()
}

// publish adds the order as a producer does (redisstream's Idem-Id and
// payload fields), with its sequence number and the key header the guard
// reads.
func (b *redisBroker) publish(ctx context.Context, m message, seq uint64) error {
	err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{
		redisstream.FieldID: m.Order.ID, redisstream.FieldPayload: string(m.payload()),
		orderHeader: m.Order.ID, seqHeader: strconv.FormatUint(seq, 10),
	}}).Err()
	if err != nil {
		return fmt.Errorf("%w: publish %s: %v", ErrBroker, m.Order.ID, err)
	}
	return nil
}

func (b *redisBroker) open(_ context.Context, group string) (session, error) {
	return &redisSession{b: b, group: group, name: fmt.Sprintf("%s-%d", group, b.sessions.Add(1))}, nil
}

type redisSession struct {
	b           *redisBroker
	group, name string
}

// fetch claims the group's entries idle for AckWait (a crashed member's,
// and those retried), else reads new ones, waiting a quarter second.
func (s *redisSession) fetch(ctx context.Context) iter.Seq[delivery] {
	return func(yield func(delivery) bool) {
		msgs, _, err := s.b.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s.b.stream, Group: s.group, Consumer: s.name,
			MinIdle: s.b.ackWait, Start: "0-0", Count: 16}).Result()
		if err == nil && len(msgs) == 0 {
			var res []redis.XStream
			res, err = s.b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.group, Consumer: s.name, Streams: []string{s.b.stream, ">"},
				Count: 16, Block: 250 * time.Millisecond}).Result()
			for _, st := range res {
				msgs = append(msgs, st.Messages...)
			}
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			sleep(ctx, 50*time.Millisecond)
			return
		}
		for _, m := range msgs {
			if !yield(&redisDelivery{s: s, m: m, ctx: ctx}) {
				return
			}
		}
	}
}

// close leaves the member's pending entries to be claimed, as a dead
// process's would be.
func (s *redisSession) close() {}

type redisDelivery struct {
	s   *redisSession
	m   redis.XMessage
	ctx context.Context
}

func (d *redisDelivery) field(name string) string { v, _ := d.m.Values[name].(string); return v }

func (d *redisDelivery) seq() uint64  { return seqOf(d.field(seqHeader)) }
func (d *redisDelivery) data() []byte { return []byte(d.field(redisstream.FieldPayload)) }
func (d *redisDelivery) key() string  { return d.field(orderHeader) }

func (d *redisDelivery) ack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.s.b.rdb.XAck(ctx, d.s.b.stream, d.s.group, d.m.ID).Err()
}

// retry leaves the entry pending with an idle time that makes it
// claimable once delay has passed.
func (d *redisDelivery) retry(delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.ctx), 2*time.Second)
	defer cancel()
	idle := max(d.s.b.ackWait-delay, 0)
	_ = d.s.b.rdb.Do(ctx, "XCLAIM", d.s.b.stream, d.s.group, d.s.name, 0, d.m.ID, "IDLE", idle.Milliseconds(), "JUSTID").Err()
}

func (d *redisDelivery) deadLetter(ctx context.Context, reason string, cause error) error {
	vals := map[string]any{"Idem-Reason": reason, "Idem-Error": strings.ReplaceAll(cause.Error(), "\n", " ")}
	for k, v := range d.m.Values {
		vals[k] = v
	}
	_, err := d.s.b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: d.s.b.dlq, Values: vals})
		p.XAck(ctx, d.s.b.stream, d.s.group, d.m.ID)
		return nil
	})
	return err
}
