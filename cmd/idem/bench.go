package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/cmd/idem/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var (
		f   storeFlags
		cfg bench.Config
	)
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure a store's throughput and latency with idem, against the raw store",
		Long: `bench runs --concurrency workers for --duration, each claiming fresh keys in
the chosen mode, and reports keys per second and call latency (p50, p99).
In the same run it measures the baseline: the same write without idem (a
plain conflict-free insert per transaction into a scratch table for SQL
stores, SET NX PX for Redis, a map insert under a mutex for memory). The two
sides alternate in --rounds slices (idem, baseline, baseline, idem, ...) of
--duration/--rounds each, so a change in the machine's load during the run
hits both alike. The ratio is idem's throughput over the baseline's, and
the output names the baseline it was measured against.

The baseline is the plain way to make the same write, not a ceiling: a
ratio above 1 happens where idem's path makes fewer round trips (on
PostgreSQL, tx mode sends BEGIN together with its marker, and a batch claim
is one autocommitted statement, where the baseline's transaction is three
round trips), and within one run's noise (about ±0.03 on a quiet machine,
±0.1 on a loaded one). The figures measured so far, with their commands,
are in docs/performance.md and the store packages' BENCH.md files.

Modes:
  two-phase  claim + complete per key (Guard.Do with an empty handler)
  tx         begin, mark, commit per key (DoTx with an empty business write)
  batch      one batch claim of --batch keys per call (ClaimBatch)

Benchmark keys live in their own scope with a one-minute retention; the
baseline's scratch table is dropped at the end.

--prefill N first loads N completed records (scope idem-prefill, ids shaped
like UUIDv7s, a SHA-256 fingerprint, --prefill-result bytes of result,
retention a week) so that the run measures a store that already holds
them; --prefill-expired is the share of them whose retention already
ended, spread over the past week. PostgreSQL generates the rows in the
server (INSERT .. SELECT FROM generate_series); MariaDB and SQLite take
multi-row inserts; Redis and the others the store's batch claims and
completes (live records only). The load goes in chunks of 50,000, each in
one transaction; chunks the store already holds are skipped, so a run on
the same store reuses an earlier prefill, and a larger N adds only the
records beyond it. The records stay: use a table (?table=) of their own
and drop it after. With a prefill on an SQL store, the output gives the
table's size (table, each index, bytes per record).

--sweep adds, after the run, idem's calls for one slice idle, then while
idem.Sweeper deletes every expired record (batches of --sweep-batch), then
one more idle slice: the sweep's rows per second and the p99 latency of the
calls while it runs beside the idle p99.`,
		Example: `  idem bench --store memory:// --mode two-phase --duration 2s
  idem bench --store sqlite:///tmp/bench.db --mode tx --concurrency 4 --duration 10s
  idem bench --store postgres://localhost/bench --mode batch --batch 200 --json
  idem bench --store 'postgres://localhost/bench?table=bench_10m' --prefill 10000000 --prefill-expired 0.5 --sweep`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			switch cfg.Mode {
			case bench.ModeTwoPhase, bench.ModeTx, bench.ModeBatch:
			default:
				return usagef("--mode %q: want two-phase, tx or batch", cfg.Mode)
			}
			if cfg.Concurrency < 1 || cfg.Concurrency > 1024 {
				return usagef("--concurrency must be between 1 and 1024")
			}
			if cfg.Duration <= 0 {
				return usagef("--duration must be positive")
			}
			if cfg.Batch < 1 || cfg.Batch > 10_000 {
				return usagef("--batch must be between 1 and 10000")
			}
			if cfg.Rounds < 1 || cfg.Rounds > 100 {
				return usagef("--rounds must be between 1 and 100")
			}
			if cfg.Prefill.N < 0 || cfg.Prefill.Expired < 0 || cfg.Prefill.Expired > 1 || cfg.Prefill.ResultBytes < 0 {
				return usagef("--prefill must be ≥ 0, --prefill-expired between 0 and 1, --prefill-result ≥ 0")
			}
			if cfg.SweepBatch < 1 || cfg.SweepBatch > 100_000 {
				return usagef("--sweep-batch must be between 1 and 100000")
			}
			ctx := c.Context()
			h, err := f.open(ctx, false)
			if err != nil {
				return err
			}
			defer h.Close()
			if h.Migrate != nil && h.Scheme == "sqlite" {
				// A fresh SQLite file is the usual bench target: create its
				// schema rather than fail.
				if err := h.Migrate(ctx); err != nil {
					return err
				}
			}
			if h.Probe != nil {
				if err := h.Probe(ctx); err != nil {
					return err
				}
			}
			res, err := bench.Run(ctx, h, cfg)
			if errors.Is(err, bench.ErrMode) || errors.Is(err, bench.ErrPrefill) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(c.OutOrStdout(), res)
			}
			w := c.OutOrStdout()
			fmt.Fprintf(w, "idem bench: %s, mode %s", res.Store, res.Mode)
			if res.Batch > 0 {
				fmt.Fprintf(w, " (batches of %d)", res.Batch)
			}
			fmt.Fprintf(w, ", %d workers, %v a side in %d alternating slices\n\n", res.Concurrency, cfg.Duration, res.Rounds)
			tw := newTable(w)
			fmt.Fprintln(tw, "\tkeys/s\tp50\tp99\terrors\t")
			fmt.Fprintf(tw, "idem (%s)\t%.0f\t%s\t%s\t%d\t\n", res.Mode, res.OpsPerSec, latency(res.P50ms), latency(res.P99ms), res.Errors)
			fmt.Fprintf(tw, "baseline\t%.0f\t%s\t%s\t%d\t\n", res.BaselineOpsPerSec, latency(res.BaselineP50ms), latency(res.BaselineP99ms), res.BaselineErrors)
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(w, "\nratio %.2f = idem's keys/s ÷ the baseline's\nbaseline: %s\n%s\n", res.Ratio, res.Baseline, res.RatioNote)
			printExtras(w, res)
			return nil
		},
	}
	f.add(c)
	fl := c.Flags()
	fl.StringVar(&cfg.Mode, "mode", bench.ModeTwoPhase, "two-phase, tx or batch")
	fl.IntVar(&cfg.Concurrency, "concurrency", 8, "concurrent workers")
	fl.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long each side (idem, baseline) runs in all")
	fl.IntVar(&cfg.Rounds, "rounds", 4, "slices each side's duration is cut into, run alternately")
	fl.IntVar(&cfg.Batch, "batch", 100, "keys per batch claim (batch mode)")
	fl.Int64Var(&cfg.Prefill.N, "prefill", 0, "records the store holds before the run (loaded when missing)")
	fl.Float64Var(&cfg.Prefill.Expired, "prefill-expired", 0, "share of the prefilled records already expired (0..1)")
	fl.IntVar(&cfg.Prefill.ResultBytes, "prefill-result", 0, "bytes of stored result per prefilled record")
	fl.BoolVar(&cfg.Sweep, "sweep", false, "also measure calls while the sweeper deletes the expired records")
	fl.IntVar(&cfg.SweepBatch, "sweep-batch", 1000, "records per sweep batch (--sweep)")
	return c
}

// printExtras prints the prefill, the table's size and the sweep
// measurement when the run had them.
func printExtras(w io.Writer, res *bench.Result) {
	if p := res.Prefill; p != nil {
		fmt.Fprintf(w, "\nprefill: %d records (%d expired, %d-byte results) in scope %s; ", p.Records, p.Expired, p.ResultBytes, bench.PrefillScope)
		if p.Loaded == 0 {
			fmt.Fprintf(w, "all there already (checked in %.1fs)\n", p.Seconds)
		} else {
			fmt.Fprintf(w, "loaded %d in %.1fs (%.0f rows/s) by %s\n", p.Loaded, p.Seconds, p.RowsPerSec, p.How)
		}
	}
	if s := res.Size; s != nil {
		fmt.Fprintf(w, "table: %d rows, %d bytes (%.0f bytes/record): table %d", s.Rows, s.TotalBytes, s.PerRecord, s.TableBytes)
		names := make([]string, 0, len(s.Indexes))
		for n := range s.Indexes {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, ", index %s %d", n, s.Indexes[n])
		}
		fmt.Fprintln(w)
	}
	if s := res.Sweep; s != nil {
		fmt.Fprintf(w, "sweep: %d expired records in %.1fs (%.0f rows/s, batches of %d); calls idle %.0f/s p99 %s, while sweeping %.0f/s p99 %s (%.2f× idle)\n",
			s.Swept, s.Seconds, s.RowsPerSec, s.Batch, s.IdleOpsPerSec, latency(s.IdleP99ms), s.SweepingOpsPerSec, latency(s.SweepingP99ms), s.P99Ratio)
	}
}

func latency(ms float64) string {
	if ms < 1 {
		return fmt.Sprintf("%.0fµs", ms*1000)
	}
	return fmt.Sprintf("%.2fms", ms)
}
