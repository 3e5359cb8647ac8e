package redisidem_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	redisidem "github.com/idemgo/idem/store/redis"
)

// benchWorkers is the concurrency of every benchmark below, so the raw
// baselines and the store run under the same load.
const benchWorkers = 16

// benchBatch is the pipeline depth of the batched benchmarks.
const benchBatch = 100

// spread runs fn over keys [0, total), per keys at a time, on benchWorkers
// goroutines and returns the wall time.
func spread(total, per int, fn func(first, n int) error) (time.Duration, error) {
	var (
		next int64
		wg   sync.WaitGroup
		errs = make(chan error, benchWorkers)
	)
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(atomic.AddInt64(&next, int64(per)) - int64(per))
				if first >= total {
					return
				}
				if err := fn(first, min(per, total-first)); err != nil {
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

// runWorkers spreads b.N keys over the workers and reports keys per second.
func runWorkers(b *testing.B, per int, fn func(first, n int) error) {
	b.Helper()
	b.ResetTimer()
	elapsed, err := spread(b.N, per, fn)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "keys/s")
}

// workload is one way of claiming keys first..first+n-1.
type workload struct {
	name  string
	per   int // keys per call of fn
	round int // keys per round in BenchmarkRedisRatio
	fn    func(first, n int) error
}

// workloads returns the four workloads, each under its own key prefix:
//
//   - raw-setnx: SET key value NX PX, the least a dedup claim can cost;
//   - claim-complete: Store.Claim then Store.Complete per key, as a
//     consumer does around its handler (two commands; the completion shares
//     its round trip with concurrent ones);
//   - raw-setnx-pipelined: SET NX PX, 100 per pipeline;
//   - claim-batch: Store.ClaimBatch of 100 keys;
//   - raw-setnx+noop-script: SET NX PX then EVALSHA of a script that only
//     returns, per key: the floor of any design whose completion is fenced by
//     a script, so claim-complete can be judged against it too.
func workloads(b *testing.B, c *goredis.Client) []workload {
	ctx := context.Background()
	raw := uniquePrefix(b, c) + ":raw:"
	rawp := uniquePrefix(b, c) + ":rawp:"
	s1, s2 := benchStore(b, c), benchStore(b, c)
	floor := uniquePrefix(b, c) + ":floor:"
	noop := goredis.NewScript("return 1")
	return []workload{
		{"raw-setnx", 1, 1000, func(i, _ int) error {
			return c.SetNX(ctx, raw+strconv.Itoa(i), "1", 10*time.Minute).Err()
		}},
		{"claim-complete", 1, 1000, func(i, _ int) error {
			now := time.Now()
			k := idem.Key{Scope: "bench", ID: strconv.Itoa(i)}
			cl, err := s1.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
				LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(10 * time.Minute)})
			if err != nil {
				return err
			}
			return s1.Complete(ctx, idem.CompleteRequest{Key: k, Token: cl.Record.Token, Result: []byte("ok"),
				Now: now, ExpiresAt: now.Add(10 * time.Minute)})
		}},
		{"raw-setnx-pipelined", benchBatch, 10000, func(first, n int) error {
			pipe := c.Pipeline()
			for i := first; i < first+n; i++ {
				pipe.SetNX(ctx, rawp+strconv.Itoa(i), "1", 10*time.Minute)
			}
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"claim-batch", benchBatch, 10000, func(first, n int) error {
			now := time.Now()
			reqs := make([]idem.ClaimRequest, n)
			for j := range reqs {
				reqs[j] = idem.ClaimRequest{Key: idem.Key{Scope: "bench", ID: strconv.Itoa(first + j)}, Fingerprint: "fp",
					Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(10 * time.Minute)}
			}
			_, err := s2.ClaimBatch(ctx, reqs)
			return err
		}},
		{"raw-setnx+noop-script", 1, 1000, func(i, _ int) error {
			k := floor + strconv.Itoa(i)
			if err := c.SetNX(ctx, k, "1", 10*time.Minute).Err(); err != nil {
				return err
			}
			return noop.Run(ctx, c, []string{k}).Err()
		}},
	}
}

func benchClient(b *testing.B) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: testenv.Redis.Need(b), PoolSize: 2 * benchWorkers})
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkRedis runs each workload on its own at 16 workers and reports
// keys/s:
//
//	go test -run '^$' -bench 'BenchmarkRedis$' -benchtime 2s ./store/redis
func BenchmarkRedis(b *testing.B) {
	c := benchClient(b)
	for i, w := range workloads(b, c) {
		b.Run(w.name, func(b *testing.B) {
			w := workloads(b, c)[i] // fresh keys for each b.N
			runWorkers(b, w.per, w.fn)
		})
	}
}

// BenchmarkRedisRatio measures the store against raw Redis in one run with
// the workloads interleaved (each round runs all four, in alternating
// order), so a machine whose load drifts does not favour either side. It
// reports each workload's keys/s, the two ratios of the issue
// (claim-complete/raw-setnx and claim-batch/raw-setnx-pipelined) and
// floor/raw, the best any script-fenced claim+complete could reach.
//
//	go test -run '^$' -bench BenchmarkRedisRatio -benchtime 20x ./store/redis
func BenchmarkRedisRatio(b *testing.B) {
	c := benchClient(b)
	ws := workloads(b, c)
	elapsed := make([]time.Duration, len(ws))
	keys := make([]int, len(ws))
	b.ResetTimer()
	for r := range b.N {
		order := []int{0, 1, 4, 2, 3}
		if r%2 == 1 {
			order = []int{4, 1, 0, 3, 2}
		}
		for _, i := range order {
			w := ws[i]
			base := keys[i]
			d, err := spread(w.round, w.per, func(first, n int) error { return w.fn(base+first, n) })
			if err != nil {
				b.Fatal(err)
			}
			elapsed[i] += d
			keys[i] += w.round
		}
	}
	b.StopTimer()
	rate := make([]float64, len(ws))
	for i, w := range ws {
		rate[i] = float64(keys[i]) / elapsed[i].Seconds()
		b.ReportMetric(rate[i], w.name+"-keys/s")
	}
	b.ReportMetric(rate[1]/rate[0], "claim-complete/raw")
	b.ReportMetric(rate[3]/rate[2], "batch/raw-pipelined")
	b.ReportMetric(rate[4]/rate[0], "floor/raw")
}

func benchStore(b *testing.B, c *goredis.Client) *redisidem.Store {
	s, err := redisidem.New(c, redisidem.Options{Prefix: uniquePrefix(b, c)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}
