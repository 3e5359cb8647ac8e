package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/postgres"
)

// natsPrefetch is both sides' pull batch: idem's default, 2 × Concurrency.
const natsPrefetch = 2 * workers

type natsEnv struct {
	d           *db
	js          jetstream.JetStream
	stream, dlq string
}

// loadNATS makes a file stream of its own on the machine's JetStream
// server, preloaded with n messages; each side consumes it through a durable
// pull consumer of its own.
func loadNATS(t testing.TB, d *db, n int) map[string]side {
	t.Helper()
	nc, err := nats.Connect(testenv.NATS.Need(t), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d_%d", time.Now().UnixNano(), rand.Uint32())
	e := &natsEnv{d: d, js: js, stream: "E2E_" + tag, dlq: "e2edlq." + tag}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: e.stream, Subjects: []string{"e2e." + tag + ".>"}, Storage: jetstream.FileStorage},
		{Name: e.stream + "_DLQ", Subjects: []string{e.dlq}, Storage: jetstream.FileStorage},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := js.DeleteStream(ctx, cfg.Name); err != nil {
				t.Errorf("delete stream %s: %v", cfg.Name, err)
			}
		})
	}
	for i := range n {
		m := nats.NewMsg("e2e." + tag + ".orders")
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("order-%d", i))
		m.Data = body(i)
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if (i+1)%1000 == 0 || i == n-1 { // the client stalls past 4000 unacknowledged
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing timed out")
			}
		}
	}
	info, err := js.Stream(ctx, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(n) {
		t.Fatalf("the stream holds %d messages, want %d", got, n)
	}
	tx := func(ctx context.Context, r *run, store *postgres.Store, fn func(context.Context, pgx.Tx, jetstream.Msg) ([]byte, error)) error {
		return e.idem(ctx, r, store, natsidem.HandleTx(fn))
	}
	twoPhase := func(ctx context.Context, r *run, fn func(context.Context, jetstream.Msg) ([]byte, error)) error {
		return e.idem(ctx, r, d.store, natsidem.Handle(fn))
	}
	return sidesOf(d, natsID, func(m jetstream.Msg) []byte { return m.Data() }, e.hand, tx, "idem-2p", twoPhase)
}

func natsID(m jetstream.Msg) string { return m.Headers().Get(jetstream.MsgIDHeader) }

// consumer creates the side's durable pull consumer on the stream.
func (e *natsEnv) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	return e.js.CreateConsumer(ctx, e.stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
}

// hand is the consumer a user writes with nats.go alone: one loop pulls
// (natsPrefetch messages buffered) and hands each message to one of
// workers goroutines, which runs work and acks.
func (e *natsEnv) hand(ctx context.Context, r *run, work func(context.Context, jetstream.Msg) error) error {
	cons, err := e.consumer(ctx, "hand")
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(natsPrefetch))
	if err != nil {
		return err
	}
	defer it.Stop()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	msgs := make(chan jetstream.Msg, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for m := range msgs {
				if err := work(ctx, m); err != nil {
					stop(err)
					return
				}
				if err := m.Ack(); err != nil {
					stop(err)
					return
				}
				r.settled()
			}
		})
	}
	defer func() {
		close(msgs)
		wg.Wait()
	}()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
				return err // a worker's
			}
			return nil
		}
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			// A missed idle heartbeat (a busy server) is not the end: the
			// iterator pulls again, as natsidem's transport lets it.
			continue
		}
		if err != nil {
			return err
		}
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}
}

// idem runs idem's consumer with h over store, with
// the same workers and prefetch.
func (e *natsEnv) idem(ctx context.Context, r *run, store *postgres.Store, h natsidem.Handler) error {
	cons, err := e.consumer(ctx, "idem")
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(store, cons, idem.Options{})
	if err != nil {
		return err
	}
	return natsidem.Consume(ctx, cons, g, h, natsidem.Options{Concurrency: workers, Hooks: hooks[jetstream.Msg](r), JetStream: e.js, DeadLetterSubject: e.dlq, Prefetch: natsPrefetch})
}
