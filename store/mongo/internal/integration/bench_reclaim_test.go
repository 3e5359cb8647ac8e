package integration_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// BenchmarkMongoReclaim measures the claim of a key that exists, the path
// that writes a record conditionally (a redelivery after a failed
// handler): each key is claimed and released untimed, then claimed again
// and completed, timed, on benchWorkers goroutines (-args -workers=N):
//
//	go test -run '^$' -bench MongoReclaim -benchtime=10x ./store/mongo/ -args -workers=1
//
// b.N is the number of rounds of 500 keys.
func BenchmarkMongoReclaim(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	s := newStore(b, c, mongoidem.Options{})
	const round = 500
	req := func(i int) idem.ClaimRequest {
		now := time.Now()
		return idem.ClaimRequest{Key: idem.Key{Scope: "bench", ID: strconv.Itoa(i)}, Fingerprint: "fp", Now: now,
			LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(10 * time.Minute)}
	}
	var total time.Duration
	b.ResetTimer()
	for r := range b.N {
		b.StopTimer()
		if _, err := spread(r*round, round, func(i int) error {
			q := req(i)
			cl, err := s.Claim(ctx, q)
			if err != nil {
				return err
			}
			return s.Release(ctx, idem.ReleaseRequest{Key: q.Key, Token: cl.Record.Token, Now: q.Now})
		}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d, err := spread(r*round, round, func(i int) error {
			q := req(i)
			cl, err := s.Claim(ctx, q)
			if err != nil {
				return err
			}
			if cl.Outcome != idem.ClaimAcquired {
				b.Errorf("reclaim of %s: %v", q.Key, cl.Outcome)
			}
			return s.Complete(ctx, idem.CompleteRequest{Key: q.Key, Token: cl.Record.Token, Result: []byte("ok"),
				Now: q.Now, ExpiresAt: q.ExpiresAt})
		})
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*round)/total.Seconds(), "reclaim+complete/s")
}
