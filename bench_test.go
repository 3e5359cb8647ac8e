package idem_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
)

// BenchmarkGuardMemory measures the guard's own cost: claim + handler +
// complete on the in-memory store, new keys only, in parallel.
func BenchmarkGuardMemory(b *testing.B) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	payload := []byte(`{"amount":100}`)
	h := func(context.Context) ([]byte, error) { return nil, nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			msg := idem.Message{ID: "m-" + strconv.FormatInt(n.Add(1), 10), Payload: payload}
			if _, err := g.Do(context.Background(), msg, h); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGuardMemoryDuplicate measures a redelivery of a completed key.
func BenchmarkGuardMemoryDuplicate(b *testing.B) {
	g, err := idem.New(memory.New(), idem.Options{Scope: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	msg := idem.Message{ID: "dup", Payload: []byte(`{"amount":100}`)}
	h := func(context.Context) ([]byte, error) { return []byte("r"), nil }
	g.Do(context.Background(), msg, h)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, _ := g.Do(context.Background(), msg, h); res.Outcome != idem.OutcomeDuplicate {
				b.Fatal(res.Outcome)
			}
		}
	})
}

// benchPayload is a small order event, as a consumer sees one.
var benchPayload = []byte(`{"order":"o-1","amount":100}`)

// benchRecords is how many records a benchmark's store holds before it is
// replaced by an empty one: the 20,000 records of the Kafka measurement
// (broker/kafka BENCH.md), so that ns/op is the guard's cost per message and
// not a map and a heap that grow with b.N.
const benchRecords = 20_000

// guardBench is the setup BenchmarkDo and BenchmarkTicketDo share: an empty
// handler, message ids made before the timer starts (the caller's
// allocations, not idem's), and a fresh store every benchRecords messages.
type guardBench struct {
	b    *testing.B
	g    *idem.Guard
	h    idem.Handler
	ids  []string
	cpu0 time.Duration
}

func newGuardBench(b *testing.B) *guardBench {
	gb := &guardBench{b: b, h: func(context.Context) ([]byte, error) { return nil, nil }, ids: make([]string, b.N)}
	for i := range gb.ids {
		gb.ids[i] = "m-" + strconv.Itoa(i)
	}
	gb.fresh()
	b.ReportAllocs()
	gb.cpu0, _ = testenv.ProcessCPU()
	b.ResetTimer()
	return gb
}

// done reports cpu-ns/op: the process's CPU time per message (the fresh
// stores' setup included, which is small beside 20,000 messages).
func (gb *guardBench) done() {
	gb.b.StopTimer()
	if cpu, ok := testenv.ProcessCPU(); ok {
		gb.b.ReportMetric(float64(cpu-gb.cpu0)/float64(gb.b.N), "cpu-ns/op")
	}
}

// fresh gives the guard an empty store (outside the timer).
func (gb *guardBench) fresh() {
	gb.b.StopTimer()
	g, err := idem.New(memory.New(), idem.Options{Scope: "bench"})
	if err != nil {
		gb.b.Fatal(err)
	}
	gb.g = g
	gb.b.StartTimer()
}

// BenchmarkDo measures the guard's own cost per message on one goroutine,
// as one partition or one consumer slot sees it: Guard.Do on the memory
// store with an empty handler, a new key per message (claim, handler under
// its lease, complete). ns/op and allocs/op are per message.
func BenchmarkDo(b *testing.B) {
	gb := newGuardBench(b)
	defer gb.done()
	ctx := context.Background()
	for i := range b.N {
		if i > 0 && i%benchRecords == 0 {
			gb.fresh()
		}
		if _, err := gb.g.Do(ctx, idem.Message{ID: gb.ids[i], Payload: benchPayload}, gb.h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTicketDo is BenchmarkDo for a consumer that claims in batches
// (Kafka): Guard.ClaimBatch of 100 messages, then Ticket.Do of each. ns/op
// and allocs/op are per message, the batch claim included.
func BenchmarkTicketDo(b *testing.B) {
	const batch = 100
	gb := newGuardBench(b)
	defer gb.done()
	ctx := context.Background()
	msgs := make([]idem.Message, 0, batch)
	for i := 0; i < b.N; i += batch {
		if i > 0 && i%benchRecords == 0 {
			gb.fresh()
		}
		msgs = msgs[:0]
		for j := i; j < min(i+batch, b.N); j++ {
			msgs = append(msgs, idem.Message{ID: gb.ids[j], Payload: benchPayload})
		}
		tickets, err := gb.g.ClaimBatch(ctx, msgs)
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range tickets {
			if res, err := t.Do(ctx, gb.h); err != nil || res.Outcome != idem.OutcomeProcessed {
				b.Fatal(res.Outcome, err)
			}
		}
	}
}

// BenchmarkDoHandWritten is the floor BenchmarkDo is measured against: the
// dedup a user would write by hand for one process, on the same messages
// and the same empty handler: a mutex, a map of the ids seen with the
// SHA-256 of their payload, marked done after the handler. No lease, no
// fencing, no retention, no outcome beyond "seen": what the guard does
// besides is what the ratio of the two prices.
func BenchmarkDoHandWritten(b *testing.B) {
	type entry struct {
		sum  [sha256.Size]byte
		done bool
	}
	var (
		mu   sync.Mutex
		seen map[string]entry
	)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = "m-" + strconv.Itoa(i)
	}
	h := func(context.Context) ([]byte, error) { return nil, nil }
	ctx := context.Background()
	b.ReportAllocs()
	cpu0, _ := testenv.ProcessCPU()
	b.ResetTimer()
	for i := range b.N {
		if i%benchRecords == 0 {
			b.StopTimer()
			seen = make(map[string]entry)
			b.StartTimer()
		}
		id := ids[i]
		sum := sha256.Sum256(benchPayload)
		mu.Lock()
		e, dup := seen[id]
		if !dup {
			seen[id] = entry{sum: sum}
		}
		mu.Unlock()
		if dup {
			if e.sum != sum {
				b.Fatal("conflict")
			}
			continue
		}
		if _, err := h(ctx); err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		seen[id] = entry{sum: sum, done: true}
		mu.Unlock()
	}
	b.StopTimer()
	if cpu, ok := testenv.ProcessCPU(); ok {
		b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
