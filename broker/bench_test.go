package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
)

// benchTransport hands out b.N distinct messages, by index, as fast as the
// engine takes them, and counts the acks: the engine's own cost per
// message with nothing of a broker's.
type benchTransport struct {
	ids   []string
	buf   []int // Receive's result, reused: Run queues it before receiving again
	next  int   // Run's loop is Receive's only caller
	acked atomic.Int64
	other atomic.Int64 // retries and dead letters: none expected
	done  chan struct{}
}

func (bt *benchTransport) Receive(ctx context.Context, n int) ([]int, error) {
	if bt.next >= len(bt.ids) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	k := min(n, len(bt.ids)-bt.next)
	if cap(bt.buf) < k {
		bt.buf = make([]int, k)
	}
	out := bt.buf[:k]
	for i := range out {
		out[i] = bt.next + i
	}
	bt.next += k
	return out, nil
}

func (bt *benchTransport) Message(i int) idem.Message { return idem.Message{ID: bt.ids[i]} }

func (bt *benchTransport) Delivery(int) broker.Delivery { return broker.Delivery{Attempt: 1} }

func (bt *benchTransport) Ack(context.Context, int) error {
	if bt.acked.Add(1) == int64(len(bt.ids)) {
		close(bt.done)
	}
	return nil
}

func (bt *benchTransport) Retry(context.Context, int, time.Duration) error {
	bt.other.Add(1)
	return nil
}

func (bt *benchTransport) DeadLetter(context.Context, int, broker.DeadLetter) error {
	bt.other.Add(1)
	return nil
}

// benchKeepAlive is benchTransport with a keep-alive every 30 s (as
// JetStream's AckWait, a Service Bus lock): never due in the benchmark,
// so what it measures is the keep-alive's set-up and tear-down.
type benchKeepAlive struct{ *benchTransport }

func (benchKeepAlive) KeepAlive(context.Context, int) error { return nil }
func (benchKeepAlive) KeepAliveEvery(int) time.Duration     { return 30 * time.Second }

// BenchmarkEngine is the engine's cost per message: b.N distinct messages
// through Consumer.Run on the memory store with an empty handler, the
// transport doing nothing (with keepalive, a KeepAliver whose keep-alive is
// never due). ns/op and allocs/op are per message, the guard and the
// memory store included; cpu-ns/op is the process's CPU per message (user
// and system, GC included), which a busy shared machine does not inflate
// as it does wall time.
func BenchmarkEngine(b *testing.B) {
	for _, bc := range []struct {
		conc      int
		keepAlive bool
	}{{1, false}, {8, false}, {8, true}} {
		name := fmt.Sprintf("concurrency=%d", bc.conc)
		if bc.keepAlive {
			name += "/keepalive"
		}
		conc := bc.conc
		b.Run(name, func(b *testing.B) {
			bt := &benchTransport{ids: make([]string, b.N), done: make(chan struct{})}
			for i := range bt.ids {
				bt.ids[i] = fmt.Sprintf("order-%09d", i)
			}
			g, err := idem.New(memory.New(), idem.Options{Scope: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			h := broker.Handle(func(context.Context, int) ([]byte, error) { return nil, nil })
			var tr broker.Transport[int] = bt
			if bc.keepAlive {
				tr = benchKeepAlive{bt}
			}
			c, err := broker.NewConsumer(tr, g, h, broker.Options[int]{Concurrency: conc})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ReportAllocs()
			cpu0, _ := testenv.ProcessCPU()
			b.ResetTimer()
			go func() { done <- c.Run(ctx) }()
			<-bt.done
			b.StopTimer()
			if cpu, ok := testenv.ProcessCPU(); ok {
				b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			if n := bt.other.Load(); n != 0 {
				b.Fatalf("%d messages retried or dead-lettered", n)
			}
		})
	}
}

// BenchmarkReleaseNoticed is how soon a delivery held in progress
// elsewhere is claimed once its holder releases the key (the holder's
// handler failed), with the engine's default options and a 30 s lease:
// b.N holders, each releasing at a random moment up to a second after its
// duplicate was first held, and the time from each release to the
// duplicate's handler starting, as p50 and p99 (ms). Run it with a fixed
// count, -benchtime=200x: one round takes about two seconds whatever N.
func BenchmarkReleaseNoticed(b *testing.B) {
	n := b.N
	f := newFakeN(n + 16)
	msgs := make([]*fmsg, n)
	index := map[string]int{}
	for i := range msgs {
		msgs[i] = &fmsg{id: fmt.Sprintf("held-%06d", i), payload: "p"}
		index[msgs[i].id] = i
	}
	claimedAt := make([]atomic.Int64, n)
	e := newEngine(b, f, nil, idem.Options{Lease: 30 * time.Second}, func(_ context.Context, m *fmsg) ([]byte, error) {
		claimedAt[index[m.id]].CompareAndSwap(0, time.Now().UnixNano())
		return nil, nil
	}, broker.Options[*fmsg]{})
	finish := make([]func(error), n)
	for i, m := range msgs {
		finish[i] = holdElsewhere(b, e.g, m)
	}
	for _, m := range msgs {
		f.in <- m
	}
	waitFor(b, "every duplicate held", func() bool { return e.seen.get(idem.OutcomeInProgress) >= n })
	b.ResetTimer()
	releasedAt := make([]atomic.Int64, n)
	errHolder := errors.New("holder's handler failed")
	for i := range n {
		time.AfterFunc(rand.N(time.Second), func() {
			releasedAt[i].Store(time.Now().UnixNano())
			finish[i](errHolder)
		})
	}
	for range n {
		if c := f.next(b); c.op != "ack" {
			b.Fatalf("%s %s, want ack", c.op, c.id)
		}
	}
	b.StopTimer()
	took := make([]time.Duration, n)
	for i := range took {
		took[i] = time.Duration(max(claimedAt[i].Load()-releasedAt[i].Load(), 0))
	}
	slices.Sort(took)
	ms := func(q float64) float64 {
		return float64(took[min(int(q*float64(n)), n-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}
