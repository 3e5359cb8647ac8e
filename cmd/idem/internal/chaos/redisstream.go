package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/redisstream"
)

// Redis Streams: the broker is a redis-server of the harness's own
// (StartRedisBroker: a private port and directory, an append-only file
// synced on every write, restarted with SIGKILL), apart from the store's.
// Each pass has a work stream read by one consumer group, whose members
// are the consumer processes, and a dead-letter stream, under keys of its
// own that it deletes afterwards.

// redisMinIdle is the consumers' MinIdle: how long a killed consumer's
// entries stay pending before a survivor claims them.
const redisMinIdle = 2 * time.Second

// redisGroup is the consumer group of every pass (each pass has its own
// streams).
const redisGroup = "billing"

func newRedisClient(url string) (*goredis.Client, error) {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return goredis.NewClient(opt), nil
}

type redisBus struct {
	rdb                 *goredis.Client
	stream, dlq, counts string
	maxDeliveries       int // the consumers' MaxDeliveries (0: retry forever; Redis has no limit)
}

// openRedisStream makes the pass's work stream and its group, at the
// stream's start, before anything is added.
func openRedisStream(ctx context.Context, e *env, maxDeliveries int, naive bool) (bus, error) {
	tag := fmt.Sprintf("idem-chaos:%d:%d", os.Getpid(), time.Now().UnixNano())
	if naive {
		tag += ":naive"
	}
	rdb, err := newRedisClient(e.broker.URL())
	if err != nil {
		return nil, err
	}
	b := &redisBus{rdb: rdb, stream: tag + ":orders", dlq: tag + ":dlq", maxDeliveries: maxDeliveries}
	if b.counts, err = os.MkdirTemp(e.logs, "counts-"); err != nil {
		rdb.Close()
		return nil, err
	}
	if err := rdb.XGroupCreateMkStream(ctx, b.stream, redisGroup, "0").Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("chaos: Redis at %s: create the consumer group: %w", e.broker.URL(), err)
	}
	return b, nil
}

func (b *redisBus) names(cc *childConfig) {
	cc.Source, cc.Durable, cc.DLQ, cc.Counts, cc.MaxDeliveries = b.stream, redisGroup, b.dlq, b.counts, b.maxDeliveries
}

func (b *redisBus) close() {
	b.rdb.Del(context.Background(), b.stream, b.dlq)
	b.rdb.Close()
}

// progress: the stream's length less the entries the group has not
// delivered yet (its lag) and those pending with a consumer, live or dead.
func (b *redisBus) progress(ctx context.Context) (int64, bool, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n *goredis.IntCmd
	var groups *goredis.XInfoGroupsCmd
	if _, err := b.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		n, groups = p.XLen(ctx, b.stream), p.XInfoGroups(ctx, b.stream)
		return nil
	}); err != nil {
		return 0, false, false
	}
	for _, g := range groups.Val() {
		if g.Name != redisGroup {
			continue
		}
		lag := g.Lag
		if lag < 0 { // Redis cannot tell: count the entries after the last one delivered
			after, err := b.rdb.XRange(ctx, b.stream, "("+g.LastDeliveredID, "+").Result()
			if err != nil {
				return 0, false, false
			}
			lag = int64(len(after))
		}
		return n.Val() - lag - g.Pending, lag == 0 && g.Pending == 0, true
	}
	return 0, false, false
}

func (b *redisBus) deliveries(context.Context) int { return deliveryCounts(b.counts) }

// entryValues is a planned message as a stream entry: the order id in
// Idem-Id (none for a message without a key), the body in payload.
func entryValues(m planned) map[string]any {
	v := map[string]any{redisstream.FieldPayload: m.Data, "Content-Type": "application/json"}
	if m.ID != "" {
		v[redisstream.FieldID] = m.ID
	}
	return v
}

// produce XADDs batches in a pipeline and adds again each entry whose XADD
// got no reply (when the reply was what was lost, the order is in the
// stream twice, under two entry ids: a producer retry of the real kind).
func (b *redisBus) produce(ctx context.Context, plan *Plan, settled *atomic.Int64) error {
	return produceBatches(ctx, plan, settled, 100, func(todo []planned) []planned {
		cmds, _ := b.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, m := range todo {
				p.XAdd(ctx, &goredis.XAddArgs{Stream: b.stream, Values: entryValues(m)})
			}
			return nil
		})
		var again []planned
		for j, m := range todo {
			if j >= len(cmds) || cmds[j].Err() != nil {
				again = append(again, m)
			}
		}
		return again
	})
}

// deadLetters reads the dead-letter stream whole.
func (b *redisBus) deadLetters(ctx context.Context) ([]deadLetter, error) {
	xs, err := b.rdb.XRange(ctx, b.dlq, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("chaos: read the dead-letter stream %s: %w", b.dlq, err)
	}
	dls := make([]deadLetter, 0, len(xs))
	for _, x := range xs {
		m := redisstream.MessageOf(&redisstream.Message{Stream: b.dlq, XMessage: x})
		dls = append(dls, newDeadLetter(m.ID, m.Headers[idem.HeaderReason], m.Payload))
	}
	return dls, nil
}

// deliveryHook counts the entries a consumer process's client receives
// from XREADGROUP and XAUTOCLAIM: the group's deliveries to it.
type deliveryHook struct{ c *counter }

func (deliveryHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (deliveryHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h deliveryHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		switch c := cmd.(type) {
		case *goredis.XStreamSliceCmd:
			for _, s := range c.Val() {
				h.c.add(uint64(len(s.Messages)))
			}
		case *goredis.XAutoClaimCmd:
			msgs, _ := c.Val()
			h.c.add(uint64(len(msgs)))
		}
		return err
	}
}

func entryPayload(m *redisstream.Message) []byte { return redisstream.MessageOf(m).Payload }

// runRedisStream is a Redis Streams consumer process: a member of the
// pass's group under a name of its own, run by the redisstream package's
// consumer.
func runRedisStream(ctx context.Context, cfg childConfig, l *ledger) error {
	rdb, err := newRedisClient(cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rdb.AddHook(deliveryHook{newCounter(cfg.Counts)})
	name := fmt.Sprintf("consumer-%d", os.Getpid())
	if cfg.Naive {
		return runNaiveRedisStream(ctx, rdb, cfg, name, l)
	}
	logf("started")
	opts := l.options()
	opts.Scope = cfg.Source + "/" + cfg.Durable
	g, err := idem.New(l.store, opts)
	if err != nil {
		return err
	}
	h := handlerFor(l, entryPayload, broker.Handle[*redisstream.Message],
		broker.HandleTx[pgx.Tx, *redisstream.Message], broker.HandleTx[*sql.Tx, *redisstream.Message])
	c, err := redisstream.NewConsumer(rdb, g, h, redisstream.Options{
		Stream: cfg.Source, Group: cfg.Durable, Consumer: name, DeadLetterStream: cfg.DLQ,
		MinIdle: redisMinIdle, Block: 200 * time.Millisecond,
		Concurrency: cfg.Concurrency, MaxDeliveries: cfg.MaxDeliveries,
		Backoff: engineBackoff, ShutdownTimeout: engineShutdown, Hooks: engineHooks[*redisstream.Message](l),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// runNaiveRedisStream: claim the entries idle redisMinIdle (a killed
// consumer's, and those a failed charge left pending), else read new ones;
// charge, commit, XACK. An undecodable payload is acked (dropped).
func runNaiveRedisStream(ctx context.Context, rdb *goredis.Client, cfg childConfig, name string, l *ledger) error {
	conc := max(cfg.Concurrency, 1)
	work := make(chan goredis.XMessage)
	defer close(work)
	for range conc {
		go func() {
			for x := range work {
				switch err := l.naive(ctx, entryPayload(&redisstream.Message{XMessage: x})); {
				case err != nil && !errors.Is(err, errPoison):
					// left pending: claimed again once idle redisMinIdle
				default:
					if err == nil {
						l.kill.pass(pointSettle)
					}
					rdb.XAck(ctx, cfg.Source, cfg.Durable, x.ID)
				}
			}
		}()
	}
	for ctx.Err() == nil {
		msgs, _, err := rdb.XAutoClaim(ctx, &goredis.XAutoClaimArgs{Stream: cfg.Source, Group: cfg.Durable, Consumer: name,
			MinIdle: redisMinIdle, Start: "0-0", Count: int64(2 * conc)}).Result()
		if err == nil && len(msgs) == 0 {
			var res []goredis.XStream
			res, err = rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: cfg.Durable, Consumer: name,
				Streams: []string{cfg.Source, ">"}, Count: int64(2 * conc), Block: 200 * time.Millisecond}).Result()
			for _, s := range res {
				msgs = append(msgs, s.Messages...)
			}
		}
		if err != nil && !errors.Is(err, goredis.Nil) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, x := range msgs {
			work <- x
		}
	}
	return ctx.Err()
}
