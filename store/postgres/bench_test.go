package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/postgres"
)

var sweepRows = flag.Int("sweeprows", 1_000_000, "expired rows BenchmarkSweepWhileClaiming sweeps")

// benchWorkers is the concurrency of every benchmark: the figures in
// BENCH.md are for 8 workers on one local server.
const benchWorkers = 8

// runWorkers runs op n times spread over benchWorkers goroutines and returns
// the wall time. op gets a globally unique sequence number.
func runWorkers(b *testing.B, n int, op func(ctx context.Context, seq int64) error) time.Duration {
	b.Helper()
	base := seqBase.Add(int64(n)) - int64(n)
	return runRange(b, base+1, n, op)
}

// seqBase keeps sequence numbers (and so keys) unique across calls.
var seqBase atomic.Int64

// runRange runs op for from, from+1, .. from+n-1, spread over
// benchWorkers goroutines, and returns the wall time.
func runRange(b *testing.B, from int64, n int, op func(ctx context.Context, seq int64) error) time.Duration {
	b.Helper()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for range benchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := op(context.Background(), from+i-1); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	return time.Since(start)
}

// newCharges creates the business table of the inbox benchmarks next to
// s's table and returns its insert: INSERT .. ON CONFLICT DO NOTHING of one
// order id ($1).
func newCharges(b *testing.B, s *postgres.Store) string {
	b.Helper()
	ledger := s.Table()[:len(s.Table())-len(`"idem_records"`)] + `"charges"`
	if _, err := testPool(b).Exec(context.Background(), `CREATE TABLE `+ledger+` (order_id text PRIMARY KEY, amount int NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	return `INSERT INTO ` + ledger + ` (order_id, amount) VALUES ($1, 5) ON CONFLICT DO NOTHING`
}

// BenchmarkRatios measures, in one run and interleaved round by round (in
// alternating order) so that load on the machine hits all sides alike, at 8
// workers:
//
//   - raw: the business insert alone, INSERT .. ON CONFLICT DO NOTHING in its
//     own transaction (BEGIN, INSERT, COMMIT);
//   - inbox: idem.DoTx with the same insert (BEGIN with the marker, INSERT,
//     COMMIT: three round trips, like raw);
//   - inbox-first: the same with Options.MarkWithFirstStatement (BEGIN, the
//     marker and the INSERT in one round trip, COMMIT in the other);
//   - two-phase: Guard.Do with an empty handler (claim, then complete);
//   - autocommit: for reference, the insert as one statement outside any
//     transaction block (one round trip, what a user without a transaction
//     of their own would write).
//
// Each of the b.N rounds runs 1000 operations of each kind. Metrics are
// operations per second and the ratios against raw.
func BenchmarkRatios(b *testing.B) {
	s := newStore(b, postgres.Options{})
	pool := testPool(b)
	insert := newCharges(b, s)
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		b.Fatal(err)
	}
	first := newStore(b, postgres.Options{MarkWithFirstStatement: true})
	gFirst, err := idem.New(first, idem.Options{Scope: "billing"})
	if err != nil {
		b.Fatal(err)
	}
	// inbox is DoTx with the insert, for message ids prefix+seq.
	inbox := func(g *idem.Guard, prefix string) func(ctx context.Context, seq int64) error {
		return func(ctx context.Context, seq int64) error {
			id := fmt.Sprintf("%s%d", prefix, seq)
			_, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, insert, id)
				return nil, err
			})
			return err
		}
	}
	modes := []struct {
		name string
		op   func(ctx context.Context, seq int64) error
	}{
		{"raw", func(ctx context.Context, seq int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, fmt.Sprintf("raw-%d", seq))
				return err
			})
		}},
		{"inbox", inbox(g, "inbox-")},
		{"inbox-first", inbox(gFirst, "first-")},
		{"twophase", func(ctx context.Context, seq int64) error {
			id := fmt.Sprintf("2p-%d", seq)
			_, err := g.Do(ctx, idem.Message{ID: id, Payload: []byte(id)}, func(context.Context) ([]byte, error) {
				return nil, nil
			})
			return err
		}},
		{"autocommit", func(ctx context.Context, seq int64) error {
			_, err := pool.Exec(ctx, insert, fmt.Sprintf("auto-%d", seq))
			return err
		}},
	}
	const perRound = 1000
	// Warm the pool's connections and statement caches outside the timing.
	for _, m := range modes {
		runWorkers(b, 2*benchWorkers, m.op)
	}
	took := make([]time.Duration, len(modes))
	b.ResetTimer()
	for r := range b.N {
		for j := range modes {
			i := j // every other round in reverse, so no kind always runs first
			if r%2 == 1 {
				i = len(modes) - 1 - j
			}
			took[i] += runWorkers(b, perRound, modes[i].op)
		}
	}
	b.StopTimer()
	rate := func(i int) float64 { return float64(b.N*perRound) / took[i].Seconds() }
	for i, m := range modes {
		b.ReportMetric(rate(i), m.name+"/s")
	}
	b.ReportMetric(rate(1)/rate(0), "inbox/raw")
	b.ReportMetric(rate(2)/rate(0), "inbox-first/raw")
	b.ReportMetric(rate(3)/rate(0), "twophase/raw")
	b.ReportMetric(rate(2)/rate(4), "inbox-first/autocommit")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClaimBatch claims batches of 100 and 1000 new keys from 8
// workers; one op is 8 batches (one per worker). The metric is keys claimed
// per second.
func BenchmarkClaimBatch(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("keys=%d", size), func(b *testing.B) {
			s := newStore(b, postgres.Options{})
			now := time.Now()
			op := func(ctx context.Context, seq int64) error {
				reqs := make([]idem.ClaimRequest, size)
				for i := range reqs {
					reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "poll", ID: fmt.Sprintf("b-%d-%d", seq, i)},
						Fingerprint: "0123456789abcdef0123456789abcdef", Now: now,
						LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(7 * 24 * time.Hour), TakeOverStale: true}
				}
				cs, err := s.ClaimBatch(ctx, reqs)
				if err == nil && cs[size-1].Outcome != idem.ClaimAcquired {
					err = fmt.Errorf("batch item = %v", cs[size-1].Outcome)
				}
				return err
			}
			runWorkers(b, benchWorkers, op) // warm up
			b.ResetTimer()
			took := runWorkers(b, b.N*benchWorkers, op)
			b.ReportMetric(float64(b.N*benchWorkers*size)/took.Seconds(), "keys/s")
		})
	}
}

// BenchmarkSweepWhileClaiming fills a table with rows expired long ago, then
// measures 8 workers' claim latency twice: without a sweep, and while one
// sweeper deletes every expired row in batches of 1000. Metrics: the p99
// claim latency of each phase, their ratio, and the sweep's rows per second.
// Set the row count with -sweeprows (default 1,000,000); b.N is ignored,
// run it with -benchtime=1x.
func BenchmarkSweepWhileClaiming(b *testing.B) {
	s := newStore(b, postgres.Options{})
	pool := testPool(b)
	ctx := context.Background()
	rows := *sweepRows
	// Fill with one INSERT .. SELECT: the row layout of the store, expired a
	// day ago (sweep_at rounded down to the second, as the store writes it).
	_, err := pool.Exec(ctx, `INSERT INTO `+s.Table()+`
		(scope, id, state, fingerprint, token, attempts, lease_until, expires_at, sweep_at, created_at, updated_at)
		SELECT 'old', 'expired-' || g, 2, 'fp', 1, 1, t - interval '7 days', t, date_trunc('second', t), t - interval '7 days', t
		FROM generate_series(1, $1::int) g, LATERAL (SELECT now() - interval '1 day' - (g % 3600) * interval '1 second' AS t) tt`, rows)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+s.Table()); err != nil {
		b.Fatal(err)
	}
	claims := func(n int) []time.Duration {
		lat := make([]time.Duration, 0, n)
		var mu sync.Mutex
		runWorkers(b, n, func(ctx context.Context, seq int64) error {
			now := time.Now()
			c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "new", ID: fmt.Sprintf("n-%d", seq)},
				Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)})
			d := time.Since(now)
			if err == nil && c.Outcome != idem.ClaimAcquired {
				err = fmt.Errorf("claim = %v", c.Outcome)
			}
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
			return err
		})
		return lat
	}
	p99 := func(lat []time.Duration) time.Duration {
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	b.ResetTimer()
	base := p99(claims(20000))
	var (
		swept     int
		sweepTook time.Duration
		sweepErr  error
		stop      atomic.Bool
	)
	// Claims run in rounds until the sweeper is through.
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		st := time.Now()
		sw := &idem.Sweeper{Store: s, BatchSize: 1000}
		swept, sweepErr = sw.SweepOnce(ctx)
		sweepTook = time.Since(st)
		stop.Store(true)
	}()
	var during []time.Duration
	for !stop.Load() {
		during = append(during, claims(2000)...)
	}
	<-sweepDone
	b.StopTimer()
	if sweepErr != nil || swept != rows {
		b.Fatalf("sweep deleted %d of %d rows: %v", swept, rows, sweepErr)
	}
	sweeping := p99(during)
	b.ReportMetric(float64(base.Microseconds())/1000, "p99-ms-idle")
	b.ReportMetric(float64(sweeping.Microseconds())/1000, "p99-ms-sweeping")
	b.ReportMetric(float64(sweeping)/float64(base), "p99-ratio")
	b.ReportMetric(float64(len(during)), "claims-during-sweep")
	b.ReportMetric(float64(swept)/sweepTook.Seconds(), "swept/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRedeliveries measures a redelivery storm: idem.DoTx on keys that
// are all recorded already, at 8 workers, with the marker ahead of the
// handler (default) and with Options.MarkWithFirstStatement, interleaved
// round by round. Each round redelivers 1000 messages in each mode. The
// keys were recorded by the store that meets them again (marked=here: a
// lost acknowledgement, a broker's redelivery) or by another store on the
// same table (marked=elsewhere: a consumer restarted, a partition moved).
// Metrics are duplicates per second and first/default.
func BenchmarkRedeliveries(b *testing.B) {
	for _, elsewhere := range []bool{false, true} {
		name := "marked=here"
		if elsewhere {
			name = "marked=elsewhere"
		}
		b.Run(name, func(b *testing.B) { benchRedeliveries(b, elsewhere) })
	}
}

func benchRedeliveries(b *testing.B, elsewhere bool) {
	stores := []*postgres.Store{newStore(b, postgres.Options{}), newStore(b, postgres.Options{MarkWithFirstStatement: true})}
	const perRound = 1000
	ops := make([]func(ctx context.Context, seq int64) error, len(stores))
	for i, s := range stores {
		insert := newCharges(b, s)
		var dup atomic.Bool
		op := func(s *postgres.Store) func(ctx context.Context, seq int64) error {
			g, err := idem.New(s, idem.Options{Scope: "billing"})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, seq int64) error {
				id := fmt.Sprintf("m-%d", seq%perRound)
				res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte(id)}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
					_, err := tx.Exec(ctx, insert, id)
					return nil, err
				})
				if err == nil && res.Outcome != idem.OutcomeDuplicate && dup.Load() {
					err = fmt.Errorf("%s: %v, want a duplicate", id, res.Outcome)
				}
				return err
			}
		}
		ops[i] = op(s)
		runWorkers(b, perRound, ops[i]) // record every key
		dup.Store(true)
		if elsewhere {
			opts := postgres.Options{Table: strings.ReplaceAll(s.Table(), `"`, ""), MarkWithFirstStatement: i == 1}
			again, err := postgres.New(testPool(b), opts)
			if err != nil {
				b.Fatal(err)
			}
			ops[i] = op(again)
		}
	}
	took := make([]time.Duration, len(ops))
	b.ResetTimer()
	for r := range b.N {
		for j := range ops {
			i := j
			if r%2 == 1 {
				i = len(ops) - 1 - j
			}
			took[i] += runWorkers(b, perRound, ops[i])
		}
	}
	b.StopTimer()
	rate := func(i int) float64 { return float64(b.N*perRound) / took[i].Seconds() }
	b.ReportMetric(rate(0), "default-dups/s")
	b.ReportMetric(rate(1), "first-dups/s")
	b.ReportMetric(rate(1)/rate(0), "first/default")
	b.ReportMetric(0, "ns/op")
}
