package dlq

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem/broker/kafka"
)

// kafkaQueue reads a dead-letter topic from its partitions' start to the
// end offsets of the call's start, with no consumer group (nothing is
// committed). A replayed record stays in the topic: Kafka cannot delete
// one record.
type kafkaQueue struct {
	seeds      []string
	url        string
	dlq, topic string
	cl         *kgo.Client // producer for Replay, admin for offsets and configs
	adm        *kadm.Client
}

// OpenKafka opens kafka://HOST:PORT[,HOST:PORT]?dlq=TOPIC[&topic=T]: the
// dead-letter topic, and the consumed topic (Horizon).
func OpenKafka(_ context.Context, u *url.URL, _ string) (Queue, error) {
	q := &kafkaQueue{url: u.Redacted(), dlq: u.Query().Get("dlq"), topic: u.Query().Get("topic")}
	if q.dlq == "" && q.topic == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=TOPIC (the dead-letter topic)", ErrBadURL, q.url)
	}
	q.seeds = strings.Split(u.Host, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(q.seeds...))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.url, err)
	}
	q.cl, q.adm = cl, kadm.NewClient(cl)
	return q, nil
}

func (q *kafkaQueue) Name() string { return "Kafka topic " + q.dlq + " at " + q.url }

func (q *kafkaQueue) Close() error { q.cl.Close(); return nil }

// each reads every record of the dead-letter topic below the end offsets
// of the call's start, partition by partition in offset order, until f
// returns false.
func (q *kafkaQueue) each(ctx context.Context, f func(*kgo.Record, DeadLetter) bool) error {
	if q.dlq == "" {
		return fmt.Errorf("%w: %s has no ?dlq=TOPIC (the dead-letter topic)", ErrBadURL, q.url)
	}
	starts, err := q.adm.ListStartOffsets(ctx, q.dlq)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("dead-letter topic %s at %s: %w", q.dlq, q.url, err)
	}
	ends, err := q.adm.ListEndOffsets(ctx, q.dlq)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("dead-letter topic %s at %s: %w", q.dlq, q.url, err)
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → end offset still to reach
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := ends.Lookup(q.dlq, o.Partition); ok && end.Offset > o.Offset {
			from[o.Partition] = kgo.NewOffset().At(o.Offset)
			left[o.Partition] = end.Offset
		}
	})
	if len(left) == 0 {
		return nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(q.seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{q.dlq: from}))
	if err != nil {
		return err
	}
	defer rd.Close()
	// Records arrive per partition in offset order; across partitions
	// they are gathered first so the caller sees partitions in order.
	var got []*kgo.Record
	for len(left) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("read %s: %w", q.dlq, errs[0].Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			got = append(got, r)
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].Partition != got[j].Partition {
			return got[i].Partition < got[j].Partition
		}
		return got[i].Offset < got[j].Offset
	})
	for _, r := range got {
		if !f(r, kafkaDeadLetter(r)) {
			return nil
		}
	}
	return nil
}

func kafkaDeadLetter(r *kgo.Record) DeadLetter {
	h := make(map[string]string, len(r.Headers))
	for _, x := range r.Headers {
		if _, ok := h[x.Key]; !ok { // the first: idem's headers come before the original's
			h[x.Key] = string(x.Value)
		}
	}
	dl := deadLetterOf(fmt.Sprintf("%d/%d", r.Partition, r.Offset), h, r.Value)
	dl.Source, dl.At = h[kafka.HeaderOriginalTopic], r.Timestamp
	return dl
}

func (q *kafkaQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.each(ctx, func(_ *kgo.Record, dl DeadLetter) bool {
		out = append(out, dl)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Replay produces each selected dead letter to its original topic with
// kafka.Replay. The dead letter stays in its topic.
func (q *kafkaQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	want := idSet(ids)
	return q.each(ctx, func(r *kgo.Record, dl DeadLetter) bool {
		if !want[dl.ID] {
			return true
		}
		delete(want, dl.ID)
		done(dl, kafka.Replay(ctx, q.cl, r))
		return len(want) > 0
	})
}

// Horizon reads retention.ms of the consumed topic (a group reset reads
// it again) and of the dead-letter topic (how long a replay can come).
func (q *kafkaQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	var topics []string
	for _, t := range []string{q.topic, q.dlq} {
		if t != "" {
			topics = append(topics, t)
		}
	}
	rcs, err := q.adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("topic configs at %s: %w", q.url, err)
	}
	var (
		spans []Span
		notes []error
	)
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, nil, fmt.Errorf("topic %s at %s: %w", rc.Name, q.url, rc.Err)
		}
		dead := rc.Name == q.dlq
		what := "topic " + rc.Name + ": retention.ms (a consumer group reset reads it again)"
		if dead {
			what = "dead-letter topic " + rc.Name + ": retention.ms"
		}
		ms := int64(7 * 24 * time.Hour / time.Millisecond) // Kafka's default
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				if n, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
					ms = n
				}
			}
		}
		spans = append(spans, Span{What: what, Duration: time.Duration(ms) * time.Millisecond, Unbounded: ms < 0, DeadLetters: dead})
	}
	return spans, notes, nil
}

var _ Horizoner = (*kafkaQueue)(nil)
