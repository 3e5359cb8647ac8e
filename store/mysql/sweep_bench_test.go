package mysql_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// BenchmarkSweepWhileClaiming measures what a sweep costs the claims running
// beside it: 8 workers claim new keys before, during and after a sweep of
// 50,000 expired records (batches of 1000), and the benchmark reports the
// p99 claim latency during the sweep against the p99 before and after it.
// Run it once: -benchtime=1x.
func BenchmarkSweepWhileClaiming(b *testing.B) {
	const expired, batch = 50_000, 1000
	f := newBench(b)
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UnixMilli()
	row := fmt.Sprintf("('old', ?, NULL, 'completed', '', NULL, 1, 1, %d, %d, %d, %d)", old, old, old, old)
	stmt := "INSERT INTO `" + f.s.Table() + "` (scope, id, display_id, state, fingerprint, result, token, attempts," +
		" lease_until, expires_at, created_at, updated_at) VALUES " + strings.TrimSuffix(strings.Repeat(row+",", batch), ",")
	for i := 0; i < expired; i += batch {
		args := make([]any, batch)
		for j := range args {
			args[j] = fmt.Sprint("o-", i+j)
		}
		if _, err := f.db.ExecContext(ctx, stmt, args...); err != nil {
			b.Fatal(err)
		}
	}
	var seq int64
	var mu sync.Mutex
	// claims runs 8 workers until stop is closed or n claims are done, and
	// returns their latencies.
	claims := func(n int, stop <-chan struct{}) []time.Duration {
		var (
			wg  sync.WaitGroup
			out []time.Duration
		)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					if len(out) >= n {
						mu.Unlock()
						return
					}
					seq++
					id := fmt.Sprint("new-", seq)
					mu.Unlock()
					select {
					case <-stop:
						return
					default:
					}
					now := time.Now()
					start := time.Now()
					_, err := f.s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "live", ID: id}, Now: now,
						LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)})
					d := time.Since(start)
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					out = append(out, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return out
	}
	p99 := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	b.ResetTimer()
	quiet := claims(1000, nil)
	stop := make(chan struct{})
	var (
		swept    int
		sweepDur time.Duration
	)
	go func() {
		defer close(stop)
		start := time.Now()
		for {
			n, err := f.s.Sweep(ctx, idem.SweepRequest{Now: time.Now(), Limit: batch})
			if err != nil {
				b.Error(err)
				return
			}
			swept += n
			if n == 0 {
				sweepDur = time.Since(start)
				return
			}
		}
	}()
	during := claims(1<<30, stop)
	quiet = append(quiet, claims(1000, nil)...)
	b.StopTimer()
	if swept != expired {
		b.Fatalf("swept %d of %d", swept, expired)
	}
	b.ReportMetric(float64(p99(quiet).Microseconds())/1000, "p99_quiet_ms")
	b.ReportMetric(float64(p99(during).Microseconds())/1000, "p99_sweeping_ms")
	b.ReportMetric(float64(p99(during))/float64(p99(quiet)), "p99_ratio")
	b.ReportMetric(float64(swept)/sweepDur.Seconds(), "swept_rows/s")
	b.ReportMetric(float64(len(during)), "claims_during_sweep")
}
