package dlq

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgo/idem/broker/redisstream"
)

// redisQueue reads a dead-letter stream with XRANGE (nothing is claimed
// or acked) and replays an entry with redisstream.Replay, which adds it
// back to its stream and deletes it from the dead-letter stream in one
// MULTI.
type redisQueue struct {
	rdb                *redis.Client
	url                string
	dlq, stream, group string
}

// OpenRedisStreams opens redis://[USER:PASS@]HOST:PORT[/DB]?dlq=STREAM
// [&stream=S&group=G] (or rediss://): the dead-letter stream, and the
// consumed stream and its group (Horizon). Other query parameters go to
// go-redis, as in a store DSN.
func OpenRedisStreams(_ context.Context, u *url.URL, _ string) (Queue, error) {
	q := &redisQueue{url: u.Redacted()}
	params := u.Query()
	q.dlq, q.stream, q.group = params.Get("dlq"), params.Get("stream"), params.Get("group")
	if q.dlq == "" && q.stream == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=STREAM (the dead-letter stream)", ErrBadURL, q.url)
	}
	for _, k := range []string{"dlq", "stream", "group"} {
		params.Del(k)
	}
	server := *u
	server.RawQuery = params.Encode()
	opts, err := redis.ParseURL(server.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadURL, q.url, err)
	}
	opts.ClientName = "idem-dlq"
	q.rdb = redis.NewClient(opts)
	return q, nil
}

func (q *redisQueue) Name() string { return "Redis stream " + q.dlq + " at " + q.url }

func (q *redisQueue) Close() error { return q.rdb.Close() }

// entries are the dead-letter stream's entries from start on, at most
// count (all when count <= 0).
func (q *redisQueue) entries(ctx context.Context, start string, count int) ([]redis.XMessage, error) {
	if q.dlq == "" {
		return nil, fmt.Errorf("%w: %s has no ?dlq=STREAM (the dead-letter stream)", ErrBadURL, q.url)
	}
	var (
		ms  []redis.XMessage
		err error
	)
	if count > 0 {
		ms, err = q.rdb.XRangeN(ctx, q.dlq, start, "+", int64(count)).Result()
	} else {
		ms, err = q.rdb.XRange(ctx, q.dlq, start, "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("read dead-letter stream %s at %s: %w", q.dlq, q.url, err)
	}
	return ms, nil
}

func redisDeadLetter(m redis.XMessage) DeadLetter {
	h := make(map[string]string, len(m.Values))
	var body []byte
	for k, v := range m.Values {
		if k == redisstream.FieldPayload {
			body = []byte(fmt.Sprint(v))
			continue
		}
		h[k] = fmt.Sprint(v)
	}
	dl := deadLetterOf(m.ID, h, body)
	dl.Source = h[redisstream.FieldStream]
	if ms, _, ok := strings.Cut(m.ID, "-"); ok { // an entry id is its time in ms, then a sequence
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			dl.At = time.UnixMilli(n)
		}
	}
	return dl
}

func (q *redisQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	ms, err := q.entries(ctx, "-", limit)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(ms))
	for i, m := range ms {
		out[i] = redisDeadLetter(m)
	}
	return out, nil
}

// Replay puts each selected entry back on its stream and deletes it from
// the dead-letter stream (redisstream.Replay, one MULTI each). Entries
// added meanwhile (a conflict dead-lettered again) are not met: the ids
// are read first.
func (q *redisQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	for _, id := range ids {
		ms, err := q.rdb.XRange(ctx, q.dlq, id, id).Result()
		if err != nil {
			return fmt.Errorf("read dead-letter stream %s at %s: %w", q.dlq, q.url, err)
		}
		if len(ms) == 0 {
			continue // replayed or deleted meanwhile, or never there: the caller compares
		}
		done(redisDeadLetter(ms[0]), redisstream.Replay(ctx, q.rdb, q.dlq, ms[0]))
	}
	return nil
}

// Horizon: Redis keeps a stream's entries until they are trimmed (XTRIM,
// or MAXLEN / MINID on XADD), with no age limit, and a pending entry
// until it is acked: no broker setting bounds redelivery. What it can
// say is how old the oldest dead letter and the oldest pending entry of
// the group are.
func (q *redisQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	var (
		spans []Span
		notes []error
	)
	if q.stream != "" {
		if _, err := q.rdb.XInfoStream(ctx, q.stream).Result(); err != nil {
			return nil, nil, fmt.Errorf("stream %s at %s: %w", q.stream, q.url, err)
		}
		spans = append(spans, Span{What: "stream " + q.stream + ": Redis keeps entries until trimmed, with no age limit (a new group, or one set back with XGROUP SETID, reads them again)", Unbounded: true})
		if q.group != "" {
			p, err := q.rdb.XPending(ctx, q.stream, q.group).Result()
			if err != nil {
				return nil, nil, fmt.Errorf("group %s of stream %s at %s: %w", q.group, q.stream, q.url, err)
			}
			spans = append(spans, Span{What: fmt.Sprintf("group %s: Redis redelivers a pending entry until it is acked, with no delivery limit (%d pending now); the consumer's MaxDeliveries bounds it", q.group, p.Count),
				Unbounded: true, Budget: true})
		}
	}
	if q.dlq != "" {
		ms, err := q.entries(ctx, "-", 1)
		if err != nil {
			return nil, nil, err
		}
		what := "dead-letter stream " + q.dlq + ": Redis keeps entries until trimmed, with no age limit"
		if len(ms) > 0 {
			if at := redisDeadLetter(ms[0]).At; !at.IsZero() {
				what += fmt.Sprintf(" (the oldest is %v old)", time.Since(at).Round(time.Second))
			}
		}
		spans = append(spans, Span{What: what, Unbounded: true, DeadLetters: true})
	}
	if len(spans) == 0 {
		notes = append(notes, fmt.Errorf("%w: no ?stream= or ?dlq= in the URL", ErrNotReadable))
	}
	return spans, notes, nil
}

var _ Horizoner = (*redisQueue)(nil)
