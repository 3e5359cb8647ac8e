package watermillidem_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/idemgo/idem"
	watermillidem "github.com/idemgo/idem/broker/watermill"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
)

// The load of issue 27's comparison: benchUnique distinct messages and
// benchDups re-publications of some of them (the same UUID and payload),
// on a GoChannel.
const (
	benchUnique = 160_000
	benchDups   = 40_000
)

// BenchmarkDedup compares Watermill's Deduplicator with idem's middleware
// on the memory store, on one router handler of a GoChannel in both its
// modes (block=true: BlockPublishUntilSubscriberAck, one message in flight
// at a time; block=false: the default, the whole load reaching the router
// at once), each iteration the whole load (run with -benchtime=1x). idem retries without back-off, as a nacked message comes back
// at once to the Deduplicator. It reports msg/s
// (messages acked by the router per second, duplicates included) and
// the process's CPU per message (less sensitive than msg/s to what else
// runs on the machine), and correctness: never_processed (distinct messages whose handler never
// succeeded), applied_twice, and with fail-first the handler failing the
// first delivery of every tenth message.
//
//	go test -run '^$' -bench BenchmarkDedup -benchtime 1x ./broker/watermill
func BenchmarkDedup(b *testing.B) {
	sides := []struct {
		name string
		mw   func(b *testing.B, ch *gochannel.GoChannel) message.HandlerMiddleware
	}{
		{"watermill-deduplicator-payload-hash", func(*testing.B, *gochannel.GoChannel) message.HandlerMiddleware {
			return (&middleware.Deduplicator{}).Middleware // the defaults: Adler-32 of the payload, in memory
		}},
		{"watermill-deduplicator-uuid", func(*testing.B, *gochannel.GoChannel) message.HandlerMiddleware {
			return (&middleware.Deduplicator{KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}).Middleware
		}},
		{"idem-memory", func(b *testing.B, ch *gochannel.GoChannel) message.HandlerMiddleware {
			g, err := idem.New(memory.New(), idem.Options{Scope: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			mw, err := watermillidem.New(g, watermillidem.Options{Publisher: ch, PoisonTopic: "poison",
				Backoff: func(int) time.Duration { return 0 }})
			if err != nil {
				b.Fatal(err)
			}
			return mw.Middleware
		}},
	}
	for _, block := range []bool{true, false} {
		for _, failFirst := range []bool{false, true} {
			for _, side := range sides {
				benchDedupSide(b, side.name, side.mw, block, failFirst)
			}
		}
	}
}

// benchDedupSide runs one side of BenchmarkDedup on a GoChannel that
// blocks each Publish until the message is acked (one message in flight),
// or, with block false, on the default one (the whole load reaches the
// router at once).
func benchDedupSide(b *testing.B, name string, mw func(*testing.B, *gochannel.GoChannel) message.HandlerMiddleware, block, failFirst bool) {
	b.Run(fmt.Sprintf("block=%v/%s/fail-first=%v", block, name, failFirst), func(b *testing.B) {
		for range b.N {
			ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: block}, watermill.NopLogger{})
			r := runDedupLoad(b, ch, mw(b, ch), failFirst)
			ch.Close()
			b.ReportMetric(r.rate, "msg/s")
			b.ReportMetric(r.cpu, "cpu-µs/msg")
			b.ReportMetric(float64(r.never), "never_processed")
			b.ReportMetric(float64(r.twice), "applied_twice")
		}
	})
}

type dedupResult struct {
	rate, cpu    float64 // msg/s; process CPU µs per message published
	never, twice int
}

// runDedupLoad publishes the load to a router whose handler runs under mw
// and waits until every message is acked, or until no message has been
// acked for a while (a middleware that drops a retry never acks it again:
// the run ends, and what never ran is counted).
func runDedupLoad(b *testing.B, ch *gochannel.GoChannel, mw message.HandlerMiddleware, failFirst bool) dedupResult {
	b.Helper()
	var (
		applied = make([]atomic.Int32, benchUnique)
		failed  = make([]atomic.Bool, benchUnique)
		acked   atomic.Int64
	)
	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	errFirst := errors.New("the first delivery fails")
	handler := func(msg *message.Message) ([]*message.Message, error) {
		i, err := strconv.Atoi(msg.UUID[2:])
		if err != nil {
			return nil, err
		}
		if failFirst && i%10 == 0 && failed[i].CompareAndSwap(false, true) {
			return nil, errFirst
		}
		applied[i].Add(1)
		return nil, nil
	}
	count := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				acked.Add(1)
			}
			return out, err
		}
	}
	h := count(mw(handler))
	r.AddNoPublisherHandler("bench", "orders", ch, func(msg *message.Message) error {
		_, err := h(msg)
		return err
	})
	go func() { _ = r.Run(b.Context()) }()
	<-r.Running()
	defer r.Close()

	msgs := make([]*message.Message, 0, benchUnique+benchDups)
	for i := range benchUnique {
		msgs = append(msgs, message.NewMessage(fmt.Sprintf("m-%07d", i), []byte(fmt.Sprintf(`{"order":%d,"amount":%d}`, i, 10+i%90))))
	}
	// A re-publication every fifth message, of one published a little
	// before: 20% of the load.
	out := make([]*message.Message, 0, len(msgs)+benchDups)
	for i, m := range msgs {
		out = append(out, m)
		if i%4 == 3 && len(out) < benchUnique+benchDups {
			out = append(out, msgs[max(i-100, 0)].Copy())
		}
	}
	b.ResetTimer()
	cpu0, _ := testenv.ProcessCPU()
	start := time.Now()
	// GoChannel's Publish, with BlockPublishUntilSubscriberAck, holds the
	// topic's lock until the message is acked: one message in flight at a
	// time, a steady flow. Without it, the whole load reaches the router at
	// once: goroutines by the thousand contend for one lock, and the figures
	// are much the scheduler's.
	for _, m := range out {
		if err := ch.Publish("orders", m); err != nil {
			b.Fatal(err)
		}
	}
	total := int64(len(out))
	last, lastAt := int64(0), time.Now()
	for acked.Load() < total {
		time.Sleep(5 * time.Millisecond)
		if n := acked.Load(); n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > 3*time.Second {
			break // nothing moves: the rest are never acked
		}
	}
	elapsed := time.Since(start)
	if acked.Load() < total {
		elapsed = lastAt.Sub(start)
	}
	cpu1, _ := testenv.ProcessCPU()
	b.StopTimer()
	res := dedupResult{rate: float64(acked.Load()) / elapsed.Seconds(), cpu: float64((cpu1 - cpu0).Microseconds()) / float64(total)}
	for i := range applied {
		switch n := applied[i].Load(); {
		case n == 0:
			res.never++
		case n > 1:
			res.twice++
		}
	}
	if math.IsInf(res.rate, 0) {
		res.rate = 0
	}
	return res
}
