package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
)

// BenchmarkConsume measures records per second through the consumer on the
// in-process cluster with the memory store, against a plain kgo
// poll-and-commit loop, and with a handler that waits 1ms (an API call) at
// concurrency 1 and 8. The store=200µs cases put a fixed 200µs on every
// store call (a nearby database) and compare claiming each record in its
// turn (MaxClaimBatch 1) with claiming each partition's queued records in one
// round trip (the default). Run with -benchtime=20000x: b.N is the record
// count (at 5000 the plain side's fixed costs, the group join and the
// polls, weigh more than its records). cpu-ns/record is the process's CPU
// (user and system, GC and the in-process broker included) per record,
// which a busy shared machine inflates less than wall time; allocs/op is
// per record too. The plain side's client is built without ClientOptions,
// as a loop of one's own is.
func BenchmarkConsume(b *testing.B) {
	cases := []struct {
		name  string
		plain bool
		conc  int
		work  time.Duration
		store time.Duration // cost of each store round trip
		batch int           // Options.MaxClaimBatch
		// unpaused: MaxBuffered holds every record, so no partition is
		// paused (a pause drops what the client had fetched for it
		// beyond the poll, fetched and decoded again on resume)
		unpaused bool
		// memory: the guard's store is a store/memory Store itself, not
		// the countingStore wrapping one (which counts trips/record, and
		// which the guard, not knowing it is in memory, bounds by
		// StoreTimeout as any other store)
		memory bool
	}{
		{"handler=0/plain-kgo", true, 1, 0, 0, 0, false, false},
		{"handler=0/idem-c8", false, 8, 0, 0, 0, false, false},
		{"handler=0/idem-c8-memory", false, 8, 0, 0, 0, false, true},
		{"handler=0/idem-c8-unpaused", false, 8, 0, 0, 0, true, false},
		{"handler=1ms/plain-kgo", true, 1, time.Millisecond, 0, 0, false, false},
		{"handler=1ms/idem-c1", false, 1, time.Millisecond, 0, 0, false, false},
		{"handler=1ms/idem-c8", false, 8, time.Millisecond, 0, 0, false, false},
		{"store=200µs/claim=record-c1", false, 1, 0, 200 * time.Microsecond, 1, false, false},
		{"store=200µs/claim=batch-c1", false, 1, 0, 200 * time.Microsecond, 0, false, false},
		{"store=200µs/claim=record-c8", false, 8, 0, 200 * time.Microsecond, 1, false, false},
		{"store=200µs/claim=batch-c8", false, 8, 0, 200 * time.Microsecond, 0, false, false},
	}
	for i, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			e := benchEnv(b, fmt.Sprintf("bench%d", i))
			work := func() {
				if bc.work > 0 {
					time.Sleep(bc.work) // stands for a remote call
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			var cl *kgo.Client
			fetched := new(fetchCount)
			if bc.plain {
				cl = e.plainClient(kgo.WithHooks(fetched))
			} else {
				cl = e.consumerClient(kgo.WithHooks(fetched))
			}
			defer cl.Close()
			var st *countingStore
			b.ReportAllocs()
			cpu0, _ := testenv.ProcessCPU()
			b.ResetTimer()
			if bc.plain {
				go func() { done <- plainLoop(ctx, cl, work) }()
			} else {
				var g *idem.Guard
				if bc.memory {
					var err error
					if g, err = idem.New(memory.New(), idem.Options{Scope: e.group}); err != nil {
						b.Fatal(err)
					}
				} else {
					g, st = newCountingGuard(b, e, nil, bc.store, 0) // default lease
				}
				h := kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) { work(); return nil, nil })
				c, err := kafka.NewConsumer(cl, g, h, kafka.Options{Concurrency: bc.conc, DeadLetterTopic: e.dlq, CommitInterval: 20 * time.Millisecond, MaxClaimBatch: bc.batch, MaxBuffered: maxBuffered(bc.unpaused, b.N)})
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					done <- c.Run(ctx)
				}()
			}
			for !e.allCommitted() {
				time.Sleep(5 * time.Millisecond) // polling for the end of the run, not synchronising
			}
			b.StopTimer()
			if cpu, ok := testenv.ProcessCPU(); ok {
				b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/record")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(fetched.n.Load())/float64(b.N), "fetched/record")
			if st != nil {
				b.ReportMetric(float64(st.trips.Load())/float64(b.N), "trips/record")
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// fetchCount counts the records the client decoded from fetches
// (kgo.HookFetchRecordBuffered): above one per record, records were
// fetched again (a paused partition's buffered records are dropped, and
// fetched and decoded again on resume).
type fetchCount struct{ n atomic.Int64 }

func (f *fetchCount) OnFetchRecordBuffered(*kgo.Record) { f.n.Add(1) }

// maxBuffered is Options.MaxBuffered for n records: the default, or all n
// when unpaused.
func maxBuffered(unpaused bool, n int) int {
	if unpaused {
		return n
	}
	return 0
}

// benchEnv is a cluster with a topic of 8 partitions holding b.N records,
// spread round robin.
func benchEnv(b *testing.B, topic string) *env {
	e := newEnv(b, topic, 8)
	recs := make([]*kgo.Record, b.N)
	for n := range recs {
		recs[n] = kafka.Record(e.topic, "", fmt.Sprintf("id-%d", n), payload(int32(n%8), n))
		recs[n].Partition = int32(n % 8)
	}
	e.produce(recs...)
	return e
}

// plainClient is the group client of a plain kgo loop: consumerClient's
// settings without ClientOptions, with autocommit off and rebalances
// blocked while a poll is processed, as an at-least-once loop is built.
func (e *env) plainClient(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(e.groupOpts(append([]kgo.Opt{kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll()}, extra...)...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// plainLoop is the usual at-least-once kgo loop without dedup: process each
// polled record, commit, poll again.
func plainLoop(ctx context.Context, cl *kgo.Client, work func()) error {
	for {
		fs := cl.PollRecords(ctx, 500)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		recs := fs.Records()
		for range recs {
			work()
		}
		if err := cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
			return err
		}
		cl.AllowRebalance()
	}
}

// BenchmarkConsumeCheckpoint measures records per second through a
// consumer whose handler inserts one row in the business database, on each
// database, three ways: the transactional inbox (HandleTx: a marker per
// record), HandleCheckpoint with keys (marker and position), and
// HandleCheckpoint with NoKeys (the position alone); and the rows each
// leaves behind per record (the store's records and the checkpoint rows;
// the effect rows aside). Eight partitions, Concurrency 8. Run with
// -benchtime=2000x: b.N is the record count.
func BenchmarkConsumeCheckpoint(b *testing.B) {
	modes := []struct {
		name string
		h    func(bk *cpBackend) kafka.Handler
	}{
		{"inbox", func(bk *cpBackend) kafka.Handler { return bk.txHandler() }},
		{"checkpoint+keys", func(bk *cpBackend) kafka.Handler { return bk.handler(bk.cp, nil) }},
		{"checkpoint", func(bk *cpBackend) kafka.Handler {
			cp := bk.cp
			cp.NoKeys = true
			return bk.handler(cp, nil)
		}},
	}
	for _, db := range cpBackends {
		for i, m := range modes {
			b.Run(db.name+"/"+m.name, func(b *testing.B) {
				bk := db.open(b)
				e := benchEnv(b, fmt.Sprintf("cpbench%d", i))
				g, err := idem.New(bk.store, idem.Options{Scope: e.group})
				if err != nil {
					b.Fatal(err)
				}
				cl := e.consumerClient()
				defer cl.Close()
				c, err := kafka.NewConsumer(cl, g, m.h(bk), kafka.Options{Concurrency: 8, DeadLetterTopic: e.dlq, CommitInterval: 20 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.ResetTimer()
				go func() { done <- c.Run(ctx) }()
				for !e.allCommitted() {
					time.Sleep(5 * time.Millisecond) // polling for the end of the run, not synchronising
				}
				b.StopTimer()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				records, checkpoints := bk.rows(b)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64(records+checkpoints)/float64(b.N), "rows/record")
			})
		}
	}
}
