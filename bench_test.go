package idem_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemgo/idem"
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
