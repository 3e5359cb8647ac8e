package mongostore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
	mongostore "github.com/idemgo/idem/store/mongo"
)

// benchWorkers is the concurrency of the benchmark, for the raw insert and
// the store alike.
const benchWorkers = 16

// spread runs fn for keys [first, first+n) on benchWorkers goroutines and
// returns the wall time.
func spread(first, n int, fn func(i int) error) (time.Duration, error) {
	var (
		next = int64(first)
		end  = int64(first + n)
		wg   sync.WaitGroup
		errs = make(chan error, benchWorkers)
	)
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= end {
					return
				}
				if err := fn(int(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	return elapsed, <-errs
}

// BenchmarkMongoRatio measures, in one run on the same server, a raw
// insertOne of a small document (the least a dedup insert can cost) and the
// store's Claim then Complete per key (what a consumer pays around its
// handler), interleaved in rounds of 500 keys each so that a change in the
// machine's load hits both alike. It reports both rates and their ratio.
//
//	go test -run '^$' -bench MongoRatio -benchtime=20x ./store/mongo/
//
// b.N is the number of rounds.
func BenchmarkMongoRatio(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	raw := testDB(c).Collection(uniqueCollection())
	b.Cleanup(func() { raw.Drop(context.Background()) })
	s := newStore(b, c, mongostore.Options{})
	// Warm both collections (created on first write) and the connections.
	if _, err := raw.InsertOne(ctx, bson.D{{Key: "_id", Value: "warm"}}); err != nil {
		b.Fatal(err)
	}
	const round = 500
	var rawTime, storeTime time.Duration
	work := []struct {
		fn    func(i int) error
		total *time.Duration
	}{
		{func(i int) error {
			_, err := raw.InsertOne(ctx, bson.D{{Key: "_id", Value: strconv.Itoa(i)}, {Key: "v", Value: 1}})
			return err
		}, &rawTime},
		{func(i int) error {
			now := time.Now()
			k := idem.Key{Scope: "bench", ID: strconv.Itoa(i)}
			cl, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
				LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(10 * time.Minute)})
			if err != nil {
				return err
			}
			return s.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Result: []byte("ok"),
				Now: now, ExpiresAt: now.Add(10 * time.Minute)})
		}, &storeTime},
	}
	b.ResetTimer()
	for r := range b.N {
		for j, w := range work {
			if r%2 == 1 { // alternate which goes first
				w = work[len(work)-1-j]
			}
			d, err := spread(r*round, round, w.fn)
			if err != nil {
				b.Fatal(err)
			}
			*w.total += d
		}
	}
	b.StopTimer()
	keys := float64(b.N * round)
	rawRate, storeRate := keys/rawTime.Seconds(), keys/storeTime.Seconds()
	b.ReportMetric(rawRate, "raw-inserts/s")
	b.ReportMetric(storeRate, "claim+complete/s")
	b.ReportMetric(storeRate/rawRate, "ratio")
}
