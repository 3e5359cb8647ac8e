package matrix

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/outbox"
	outboxnats "github.com/idemgo/idem/outbox/nats"
	outboxpostgres "github.com/idemgo/idem/outbox/postgres"
)

var (
	benchMessages = flag.Int("messages", 100000, "messages BenchmarkRelayThroughput drains")
	benchBatch    = flag.Int("batch", 1000, "the relay's BatchSize")
	benchRate     = flag.Int("rate", 20000, "messages/s BenchmarkRelayLag enqueues")
	benchKeys     = flag.Int("keys", 10000, "distinct ordering keys (0: none)")
)

// relayBench is a PostgreSQL outbox and a JetStream stream (file storage,
// the server's defaults) on the servers testenv names.
type relayBench struct {
	store   *outboxpostgres.Store
	pool    interface{ Close() }
	pub     *outboxnats.Publisher
	subject string
	js      jetstream.JetStream
	stream  string
	payload []byte
}

func newRelayBench(b *testing.B) *relayBench {
	b.Helper()
	pool, _, _ := pgtest.Schema(b, "outbox_bench")
	s, err := outboxpostgres.New(pool, outboxpostgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(testenv.NATS.Need(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		b.Fatal(err)
	}
	tag := fmt.Sprintf("%d", time.Now().UnixNano())
	r := &relayBench{store: s, js: js, stream: "OUTBOX_BENCH_" + tag, subject: "outbox.bench." + tag,
		payload: []byte(`{"order_id":"o-0000000000","amount_cents":12345,"currency":"EUR","customer":"c-42","at":"2030-01-02T03:04:05Z"}`)}
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: r.stream, Subjects: []string{r.subject}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), r.stream) })
	if r.pub, err = outboxnats.New(js, outboxnats.Options{}); err != nil {
		b.Fatal(err)
	}
	return r
}

// enqueue writes n messages in transactions of 1000 (Enqueue of many).
func (r *relayBench) enqueue(b *testing.B, from, n int) {
	b.Helper()
	pool := r.store.Pool()
	for i := 0; i < n; i += 1000 {
		msgs := make([]outbox.Message, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			msgs = append(msgs, r.msg(from+j))
		}
		if err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			return r.store.Enqueue(context.Background(), tx, msgs...)
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func (r *relayBench) msg(i int) outbox.Message {
	m := outbox.Message{ID: fmt.Sprintf("m-%d", i), Destination: r.subject, Payload: r.payload}
	if *benchKeys > 0 {
		m.OrderingKey = fmt.Sprintf("order-%d", rand.IntN(*benchKeys))
	}
	return m
}

// run runs a relay until stop is called; lags collects each batch's lag.
func (r *relayBench) run(b *testing.B, lags *[]time.Duration, mu *sync.Mutex) (stop func()) {
	rl, err := outbox.NewRelay(r.store, r.pub, outbox.RelayOptions{BatchSize: *benchBatch, PollInterval: 5 * time.Millisecond,
		Observer: outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
			switch e.Kind {
			case outbox.EventBatch:
				if lags != nil {
					mu.Lock()
					*lags = append(*lags, e.Lag)
					mu.Unlock()
				}
			case outbox.EventFailed, outbox.EventParked, outbox.EventError:
				b.Errorf("relay: %v %v", e.Kind, e.Err)
			}
		})})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rl.Run(ctx) }()
	return func() { cancel(); <-done }
}

func (r *relayBench) published(b *testing.B) int64 {
	st, err := r.store.Stats(context.Background(), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	return st.Published
}

// BenchmarkRelayThroughput drains -messages (100,000) messages enqueued
// beforehand from a PostgreSQL outbox to a JetStream stream, batches of
// -batch (1000), each message with one of -keys (10,000) ordering keys,
// and reports messages per second from the relay's start to the last mark.
func BenchmarkRelayThroughput(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := newRelayBench(b)
		r.enqueue(b, 0, *benchMessages)
		b.StartTimer()
		start := time.Now()
		stop := r.run(b, nil, nil)
		for r.published(b) < int64(*benchMessages) {
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		d := time.Since(start)
		stop()
		b.ReportMetric(float64(*benchMessages)/d.Seconds(), "msg/s")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayLag enqueues at -rate (20,000) messages/s for 5 s, in
// transactions of 100 every 100/rate s, while the relay runs, and reports
// the rate reached at the stream and the lag of the batches (commit to
// PubAck of a batch's oldest message): median, 99th percentile and
// maximum.
func BenchmarkRelayLag(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := newRelayBench(b)
		var (
			mu   sync.Mutex
			lags []time.Duration
		)
		stop := r.run(b, &lags, &mu)
		b.StartTimer()
		const seconds, perTx = 5, 100
		total := *benchRate * seconds
		tick := time.Duration(float64(time.Second) * perTx / float64(*benchRate))
		var sent atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		// Four producers share the ticks, so one slow commit does not
		// slow the rate.
		ticks := make(chan int, 64)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for from := range ticks {
					r.enqueueTx(b, from, perTx)
					sent.Add(perTx)
				}
			}()
		}
		for from := 0; from < total; from += perTx {
			if d := time.Until(start.Add(time.Duration(from/perTx) * tick)); d > 0 {
				time.Sleep(d)
			}
			ticks <- from
		}
		close(ticks)
		wg.Wait()
		produced := time.Since(start)
		for r.published(b) < int64(total) {
			time.Sleep(5 * time.Millisecond) // polling interval
		}
		d := time.Since(start)
		stop()
		mu.Lock()
		slices.Sort(lags)
		q := func(p float64) float64 { return lags[int(p*float64(len(lags)-1))].Seconds() * 1000 }
		b.ReportMetric(float64(total)/produced.Seconds(), "enqueued/s")
		b.ReportMetric(float64(total)/d.Seconds(), "published/s")
		b.ReportMetric(q(0.5), "lag-p50-ms")
		b.ReportMetric(q(0.99), "lag-p99-ms")
		b.ReportMetric(q(1), "lag-max-ms")
		mu.Unlock()
	}
	b.ReportMetric(0, "ns/op")
}

// enqueueTx writes n messages in one transaction.
func (r *relayBench) enqueueTx(b *testing.B, from, n int) {
	msgs := make([]outbox.Message, n)
	for j := range msgs {
		msgs[j] = r.msg(from + j)
	}
	if err := pgx.BeginFunc(context.Background(), r.store.Pool(), func(tx pgx.Tx) error {
		return r.store.Enqueue(context.Background(), tx, msgs...)
	}); err != nil {
		b.Error(err)
	}
}
