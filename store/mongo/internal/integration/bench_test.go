package integration_test

import (
	"context"
	"flag"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/idemgo/idem"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// benchWorkers is the concurrency of the benchmark, for the raw writes and
// the store alike (-args -workers=N). The default is 1: FerretDB v1 over
// SQLite serializes its writes in one SQLite database, and concurrent
// updates there wait in SQLite's busy handler for whole seconds, so at 16
// workers it measures the backend's lock waits rather than the store (see
// BENCH.md).
var benchWorkers = flag.Int("workers", 1, "concurrent workers of BenchmarkMongoRatio")

// spread runs fn for keys [first, first+n) on benchWorkers goroutines and
// returns the wall time.
func spread(first, n int, fn func(i int) error) (time.Duration, error) {
	var (
		next = int64(first)
		end  = int64(first + n)
		wg   sync.WaitGroup
		errs = make(chan error, *benchWorkers)
	)
	start := time.Now()
	for range *benchWorkers {
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

// BenchmarkMongoRatio measures, in one run on the same server, three kinds
// of work per key, interleaved in rounds of 500 keys each so that a change
// in the machine's load hits all alike:
//
//   - raw-insert: one insertOne of a small document with a string _id, the
//     least a dedup insert can cost;
//   - raw-insert+update: that insert and one updateOne by _id, the least
//     any two-phase record costs (a claim and a completion);
//   - claim+complete: the store's Claim then Complete, as a consumer pays
//     around its handler.
//
// It reports each rate and claim+complete's ratio to both raw ones:
//
//	go test -run '^$' -bench MongoRatio -benchtime=10x ./store/mongo/ -args -workers=1
//
// b.N is the number of rounds.
func BenchmarkMongoRatio(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	raw := testDB(c).Collection(uniqueCollection())
	raw2 := testDB(c).Collection(uniqueCollection())
	b.Cleanup(func() { raw.Drop(context.Background()); raw2.Drop(context.Background()) })
	s := newStore(b, c, mongoidem.Options{})
	// Create the collections (on their first write) and warm the connections.
	for _, coll := range []*mongo.Collection{raw, raw2, s.Collection()} {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "warm"}}); err != nil {
			b.Fatal(err)
		}
	}
	const round = 500
	var rawTime, raw2Time, storeTime time.Duration
	work := []struct {
		fn    func(i int) error
		total *time.Duration
	}{
		{func(i int) error {
			_, err := raw.InsertOne(ctx, bson.D{{Key: "_id", Value: strconv.Itoa(i)}, {Key: "v", Value: 1}})
			return err
		}, &rawTime},
		{func(i int) error {
			id := strconv.Itoa(i)
			if _, err := raw2.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "v", Value: 1}}); err != nil {
				return err
			}
			_, err := raw2.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 2}}}})
			return err
		}, &raw2Time},
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
	rawRate, raw2Rate, storeRate := keys/rawTime.Seconds(), keys/raw2Time.Seconds(), keys/storeTime.Seconds()
	b.ReportMetric(rawRate, "raw-insert/s")
	b.ReportMetric(raw2Rate, "raw-insert+update/s")
	b.ReportMetric(storeRate, "claim+complete/s")
	b.ReportMetric(storeRate/rawRate, "ratio-to-insert")
	b.ReportMetric(storeRate/raw2Rate, "ratio-to-insert+update")
}
