package dlq

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	natsidem "github.com/idemgo/idem/broker/nats"
)

// natsQueue reads a dead-letter stream with ordered consumers (no state
// left on the server) and deletes a dead letter from it once replayed.
type natsQueue struct {
	nc               *nats.Conn
	js               jetstream.JetStream
	url              string
	dlq              string // the dead-letter stream
	stream, consumer string // the consumed stream and durable, for Horizon
}

// OpenNATS opens nats://HOST:PORT?dlq=STREAM[&stream=S&consumer=C]: the
// dead-letter stream, and the consumed stream and durable (Horizon).
func OpenNATS(ctx context.Context, u *url.URL, raw string) (Queue, error) {
	q := &natsQueue{url: u.Redacted()}
	q.dlq = u.Query().Get("dlq")
	q.stream, q.consumer = u.Query().Get("stream"), u.Query().Get("consumer")
	if q.dlq == "" && q.stream == "" {
		return nil, fmt.Errorf("%w: %s needs ?dlq=STREAM (the dead-letter stream) or ?stream=S&consumer=C", ErrBadURL, q.url)
	}
	server := *u
	server.RawQuery = ""
	nc, err := nats.Connect(server.String(), nats.Name("idem dlq"), nats.Timeout(5*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", q.url, err)
	}
	q.nc = nc
	if q.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return q, nil
}

func (q *natsQueue) Name() string { return "NATS stream " + q.dlq + " at " + q.url }

func (q *natsQueue) Close() error { q.nc.Close(); return nil }

// deadLetterStream is the dead-letter stream, or a clear error.
func (q *natsQueue) deadLetterStream(ctx context.Context) (jetstream.Stream, error) {
	if q.dlq == "" {
		return nil, fmt.Errorf("%w: %s has no ?dlq=STREAM (the dead-letter stream)", ErrBadURL, q.url)
	}
	s, err := q.js.Stream(ctx, q.dlq)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream %s at %s: %w", q.dlq, q.url, err)
	}
	return s, nil
}

// each calls f with every dead letter stored at the call's start, oldest
// first, until f returns false.
func (q *natsQueue) each(ctx context.Context, f func(jetstream.Msg, DeadLetter) bool) error {
	s, err := q.deadLetterStream(ctx)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	for {
		msg, err := oc.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return fmt.Errorf("read %s: %w", q.dlq, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		if md.Sequence.Stream > last {
			return nil
		}
		if !f(msg, natsDeadLetter(msg, md)) || md.Sequence.Stream == last || md.NumPending == 0 {
			return nil
		}
	}
}

func natsDeadLetter(msg jetstream.Msg, md *jetstream.MsgMetadata) DeadLetter {
	h := make(map[string]string, len(msg.Headers()))
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	d := deadLetterOf(strconv.FormatUint(md.Sequence.Stream, 10), h, msg.Data())
	d.Source, d.At = h[natsidem.HeaderSubject], md.Timestamp
	return d
}

func (q *natsQueue) List(ctx context.Context, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	err := q.each(ctx, func(_ jetstream.Msg, d DeadLetter) bool {
		out = append(out, d)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// Replay publishes each selected dead letter to its subject with
// natsidem.Replay and deletes it from the dead-letter stream.
func (q *natsQueue) Replay(ctx context.Context, ids []string, done func(DeadLetter, error)) error {
	want := idSet(ids)
	s, err := q.deadLetterStream(ctx)
	if err != nil {
		return err
	}
	return q.each(ctx, func(msg jetstream.Msg, d DeadLetter) bool {
		if !want[d.ID] {
			return true
		}
		delete(want, d.ID)
		err := natsidem.Replay(ctx, q.js, msg)
		if err == nil {
			seq, _ := strconv.ParseUint(d.ID, 10, 64)
			if err = s.DeleteMsg(ctx, seq); err != nil {
				err = fmt.Errorf("replayed, but not deleted from %s (it would be replayed again): %w", q.dlq, err)
			}
		}
		done(d, err)
		return len(want) > 0
	})
}

// Horizon reads the consumed stream's consumer (MaxDeliver × AckWait, or
// its BackOff), the stream's MaxAge and duplicate window, and the
// dead-letter stream's MaxAge.
func (q *natsQueue) Horizon(ctx context.Context) ([]Span, []error, error) {
	var (
		spans []Span
		notes []error
	)
	if q.stream != "" {
		s, err := q.js.Stream(ctx, q.stream)
		if err != nil {
			return nil, nil, fmt.Errorf("stream %s at %s: %w", q.stream, q.url, err)
		}
		cfg := s.CachedInfo().Config
		spans = append(spans, Span{What: "stream " + q.stream + ": MaxAge (a consumer reset or a new consumer reads it again)",
			Duration: cfg.MaxAge, Unbounded: cfg.MaxAge == 0})
		if q.consumer == "" {
			notes = append(notes, fmt.Errorf("%w: no ?consumer= in the URL: the redelivery budget of stream %s's consumer is not read", ErrNotReadable, q.stream))
		} else {
			c, err := s.Consumer(ctx, q.consumer)
			if err != nil {
				return nil, nil, fmt.Errorf("consumer %s/%s at %s: %w", q.stream, q.consumer, q.url, err)
			}
			spans = append(spans, natsBudget(q.stream+"/"+q.consumer, c.CachedInfo().Config))
		}
	}
	if q.dlq != "" {
		s, err := q.deadLetterStream(ctx)
		if err != nil {
			return nil, nil, err
		}
		age := s.CachedInfo().Config.MaxAge
		spans = append(spans, Span{What: "dead-letter stream " + q.dlq + ": MaxAge", Duration: age, Unbounded: age == 0, DeadLetters: true})
	}
	return spans, notes, nil
}

// natsBudget is how long JetStream keeps redelivering a message the
// consumer does not ack: MaxDeliver deliveries, each AckWait apart, or
// BackOff's waits (its last repeated for the deliveries past it).
func natsBudget(name string, cfg jetstream.ConsumerConfig) Span {
	wait := cfg.AckWait
	if wait == 0 {
		wait = 30 * time.Second // JetStream's default
	}
	if cfg.MaxDeliver <= 0 {
		return Span{What: "consumer " + name + ": MaxDeliver unlimited", Unbounded: true, Budget: true}
	}
	var total time.Duration
	desc := fmt.Sprintf("MaxDeliver %d × AckWait %v", cfg.MaxDeliver, wait)
	if len(cfg.BackOff) == 0 {
		total = time.Duration(cfg.MaxDeliver) * wait
	} else {
		for i := range cfg.MaxDeliver {
			total += cfg.BackOff[min(i, len(cfg.BackOff)-1)]
		}
		desc = fmt.Sprintf("MaxDeliver %d over BackOff %v", cfg.MaxDeliver, cfg.BackOff)
	}
	return Span{What: "consumer " + name + ": " + desc, Duration: total, Budget: true}
}

var _ Horizoner = (*natsQueue)(nil)
