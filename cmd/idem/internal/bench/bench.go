// Package bench measures an idem store: throughput (keys per second) and
// latency percentiles of one mode (two-phase claims, transactional inbox
// marks, batch claims) under concurrent load, and in the same run the raw
// baseline: the same write without idem (a plain conflict-free insert in its
// own transaction for SQL stores, SET NX PX for Redis, a map insert under a
// mutex for memory). The ratio says what idem's bookkeeping costs.
//
//	res, err := bench.Run(ctx, handle, bench.Config{Mode: "two-phase", Concurrency: 8, Duration: 5 * time.Second})
//	fmt.Printf("%.0f keys/s, %.2fx the baseline\n", res.OpsPerSec, res.Ratio)
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// Modes.
const (
	ModeTwoPhase = "two-phase"
	ModeTx       = "tx"
	ModeBatch    = "batch"
)

// ErrMode means the store cannot run the requested mode.
var ErrMode = errors.New("bench mode not available")

// Config configures a run.
type Config struct {
	Mode        string        // two-phase, tx or batch
	Concurrency int           // concurrent workers; default 8
	Duration    time.Duration // per side (idem, baseline) in all; default 5s
	Batch       int           // keys per batch in batch mode; default 100
	Rounds      int           // slices each side's Duration is cut into, run alternately; default 4

	// Prefill, when its N is positive, loads that many records (scope
	// PrefillScope) before the run; see RunPrefill.
	Prefill Prefill
	// Sweep adds a measurement after the run: idem's calls for one slice
	// idle, then while idem.Sweeper deletes every expired record in
	// batches of SweepBatch (default 1000), then one slice idle again.
	Sweep      bool
	SweepBatch int
}

// SweepResult is what the sweep measurement found.
type SweepResult struct {
	Batch      int     `json:"batch"`
	Swept      int64   `json:"swept"`
	Seconds    float64 `json:"seconds"`
	RowsPerSec float64 `json:"rows_per_sec"`

	IdleOpsPerSec     float64 `json:"idle_ops_per_sec"` // idem's calls in the idle slices
	IdleP99ms         float64 `json:"idle_p99_ms"`
	SweepingOpsPerSec float64 `json:"sweeping_ops_per_sec"` // idem's calls while the sweeper ran
	SweepingP99ms     float64 `json:"sweeping_p99_ms"`
	P99Ratio          float64 `json:"p99_ratio"` // sweeping_p99_ms / idle_p99_ms
}

// Result is what a run measured. Ops count keys: a batch of 100 is 100 ops.
type Result struct {
	Store       string  `json:"store"`
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Batch       int     `json:"batch,omitempty"`
	DurationS   float64 `json:"duration_s"`
	Rounds      int     `json:"rounds"`

	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50ms     float64 `json:"p50_ms"` // latency of one call (one key, or one batch)
	P99ms     float64 `json:"p99_ms"`

	Baseline          string  `json:"baseline"`
	BaselineOps       int64   `json:"baseline_ops"`
	BaselineErrors    int64   `json:"baseline_errors"`
	BaselineOpsPerSec float64 `json:"baseline_ops_per_sec"`
	BaselineP50ms     float64 `json:"baseline_p50_ms"`
	BaselineP99ms     float64 `json:"baseline_p99_ms"`

	Prefill *PrefillResult `json:"prefill,omitempty"`
	Size    *Size          `json:"size,omitempty"` // the records table after the run (SQL stores, with a prefill)
	Sweep   *SweepResult   `json:"sweep,omitempty"`

	Ratio float64 `json:"ratio"` // ops_per_sec / baseline_ops_per_sec
	// RatioNote says how to read the ratio against this baseline, and why it
	// can exceed 1.
	RatioNote string `json:"ratio_note"`
}

// noise is how far one run's ratio moves with the machine's load, from the
// runs in the store packages' BENCH.md files.
const noise = "about ±0.03 on a quiet machine, ±0.1 on a loaded one"

// ratioNote explains a ratio against base in mode.
func ratioNote(base *baseline, mode string) string {
	if why := base.beyond[mode]; why != "" {
		return "The baseline is the same write without idem, done the plain way, and no ceiling: " + why +
			", so the ratio can exceed 1 (one run's noise: " + noise + ")."
	}
	return "The baseline is the same write without idem, done the plain way; idem does more per key, so a ratio " +
		"above 1 here would be one run's noise (" + noise + ")."
}

// op is one timed call doing n keys; worker w, call i make keys unique.
type op func(ctx context.Context, w, i int) (n int, err error)

// Run benchmarks h's store in cfg.Mode and the baseline for cfg.Duration
// each, in cfg.Rounds alternating slices (idem then baseline, then baseline
// then idem, ...) so that a change in the machine's load during the run
// hits both sides alike. Keys are unique to the run, in scope
// "idem-bench-<run>", with a one-minute retention so idem sweep (or the
// store's sweeper) removes them.
func Run(ctx context.Context, h *dsn.Handle, cfg Config) (*Result, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 5 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 4
	}
	var pre *PrefillResult
	if cfg.Prefill.N > 0 {
		var err error
		if pre, err = RunPrefill(ctx, h, cfg.Prefill); err != nil {
			return nil, err
		}
	}
	runID := fmt.Sprintf("%08x", rand.Uint32())
	g, err := idem.New(h.Store, idem.Options{Scope: "idem-bench-" + runID, Lease: 30 * time.Second, Retention: time.Minute})
	if err != nil {
		return nil, err
	}
	var idemOp op
	switch cfg.Mode {
	case ModeTwoPhase:
		idemOp = func(ctx context.Context, w, i int) (int, error) {
			return 1, processed(g.Do(ctx, idem.Message{ID: fmt.Sprintf("k-%d-%d", w, i)},
				func(context.Context) ([]byte, error) { return nil, nil }))
		}
	case ModeTx:
		if idemOp, err = txOp(g, h); err != nil {
			return nil, err
		}
	case ModeBatch:
		idemOp = func(ctx context.Context, w, i int) (int, error) {
			now := time.Now()
			reqs := make([]idem.ClaimRequest, cfg.Batch)
			for j := range reqs {
				reqs[j] = idem.ClaimRequest{Key: idem.Key{Scope: g.Options().Scope, ID: fmt.Sprintf("k-%d-%d-%d", w, i, j)},
					Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Minute)}
			}
			cs, err := idem.ClaimBatch(ctx, h.Store, reqs)
			for j, c := range cs {
				if err == nil && c.Outcome != idem.ClaimAcquired {
					err = fmt.Errorf("%w: key %s was %s", errKeyReused, reqs[j].Key, c.Outcome)
				}
			}
			return cfg.Batch, err
		}
	default:
		return nil, fmt.Errorf("%w: unknown mode %q (two-phase, tx or batch)", ErrMode, cfg.Mode)
	}
	base, err := newBaseline(ctx, h, runID)
	if err != nil {
		return nil, err
	}
	defer base.close()
	baseOp := base.one
	if cfg.Mode == ModeBatch {
		baseOp = func(ctx context.Context, w, i int) (int, error) { return cfg.Batch, base.many(ctx, w, i, cfg.Batch) }
	}

	res := &Result{Store: h.Redacted, Mode: cfg.Mode, Concurrency: cfg.Concurrency, DurationS: cfg.Duration.Seconds(),
		Rounds: cfg.Rounds, Baseline: base.name, RatioNote: ratioNote(base, cfg.Mode), Prefill: pre}
	if cfg.Mode == ModeBatch {
		res.Batch, res.Baseline = cfg.Batch, base.manyName
	}
	var sides [2]phase // idem, baseline
	ops := [2]op{idemOp, baseOp}
	slice := cfg.Duration / time.Duration(cfg.Rounds)
	for r := 0; r < cfg.Rounds && ctx.Err() == nil; r++ {
		for j := range 2 {
			i := j
			if r%2 == 1 {
				i = 1 - j
			}
			sides[i].run(ctx, cfg.Concurrency, ops[i], slice, nil)
		}
	}
	if pre != nil { // before the sweep, which leaves dead rows behind
		if res.Size, err = sizeOf(ctx, h); err != nil {
			return nil, err
		}
	}
	if cfg.Sweep {
		if res.Sweep, err = sweepWhile(ctx, h.Store, cfg, idemOp, sides[0].next, slice); err != nil {
			return nil, err
		}
	}
	ph, err := sides[0].result()
	if err != nil {
		return nil, fmt.Errorf("idem %s: %w", cfg.Mode, err)
	}
	res.Ops, res.Errors, res.OpsPerSec, res.P50ms, res.P99ms = ph.ops, ph.errs, ph.rate, ph.p50, ph.p99
	bp, err := sides[1].result()
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	res.BaselineOps, res.BaselineErrors, res.BaselineOpsPerSec, res.BaselineP50ms, res.BaselineP99ms = bp.ops, bp.errs, bp.rate, bp.p50, bp.p99
	if res.BaselineOpsPerSec > 0 {
		res.Ratio = res.OpsPerSec / res.BaselineOpsPerSec
	}
	return res, nil
}

// errKeyReused means a benchmark key was not new: the run's keys would not
// measure what they claim to.
var errKeyReused = errors.New("benchmark key not new")

// processed is err, or errKeyReused when the guard did not process the
// key (a duplicate: the run reused a key).
func processed(res idem.Result, err error) error {
	if err == nil && res.Outcome != idem.OutcomeProcessed {
		err = fmt.Errorf("%w: key %s was %s", errKeyReused, res.Key, res.Outcome)
	}
	return err
}

// maxErrorShare fails a phase whose calls mostly fail: its figures would
// measure error paths.
const maxErrorShare = 0.5

// phase accumulates one side of a run over its slices.
type phase struct {
	next     []int // per worker, the index of its next call: keys stay new across slices
	total    hist
	ops      int64
	errs     int64
	elapsed  time.Duration
	firstErr error
}

// run runs o from workers goroutines for d, or until until is closed when
// it is not nil. Calls are never cancelled
// half-way (a claim whose answer was cut off would be left in progress):
// workers stop starting new ones when the time is up.
func (p *phase) run(ctx context.Context, workers int, o op, d time.Duration, until <-chan struct{}) {
	if p.next == nil {
		p.next = make([]int, workers)
	}
	var stop atomic.Bool
	if until == nil {
		timer := time.AfterFunc(d, func() { stop.Store(true) })
		defer timer.Stop()
	} else {
		go func() { <-until; stop.Store(true) }()
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				h         hist
				ops, errs int64
				firstErr  error
			)
			i := p.next[w]
			for ; !stop.Load() && ctx.Err() == nil; i++ {
				t0 := time.Now()
				n, err := o(ctx, w, i)
				d := time.Since(t0)
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				ops += int64(n)
				h.add(d)
			}
			p.next[w] = i
			mu.Lock()
			defer mu.Unlock()
			p.total.merge(&h)
			p.ops += ops
			p.errs += errs
			if p.firstErr == nil {
				p.firstErr = firstErr
			}
		}()
	}
	wg.Wait()
	p.elapsed += time.Since(start)
}

type phaseResult struct {
	ops, errs      int64
	rate, p50, p99 float64
}

// result is the side's figures over all its slices, or an error when most
// of its calls failed.
func (p *phase) result() (phaseResult, error) {
	r := phaseResult{ops: p.ops, errs: p.errs}
	calls := p.total.n + r.errs
	if calls == 0 || float64(r.errs) > maxErrorShare*float64(calls) {
		err := p.firstErr
		if err == nil {
			err = errors.New("no call completed")
		}
		return r, fmt.Errorf("%d of %d calls failed: %w", r.errs, calls, err)
	}
	r.rate = float64(r.ops) / p.elapsed.Seconds()
	r.p50 = ms(p.total.quantile(0.50))
	r.p99 = ms(p.total.quantile(0.99))
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// sweepWhile measures idem's calls idle for one slice, then while a
// sweeper deletes every expired record, then idle for one slice again.
// next is the run's per-worker key counters, so that keys stay new.
func sweepWhile(ctx context.Context, s idem.Store, cfg Config, o op, next []int, slice time.Duration) (*SweepResult, error) {
	batch := cfg.SweepBatch
	if batch <= 0 {
		batch = 1000
	}
	idle, during := phase{next: next}, phase{next: next}
	idle.run(ctx, cfg.Concurrency, o, slice, nil)
	var (
		swept    int
		sweepErr error
		took     time.Duration
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		st := time.Now()
		swept, sweepErr = (&idem.Sweeper{Store: s, BatchSize: batch}).SweepOnce(ctx)
		took = time.Since(st)
	}()
	during.run(ctx, cfg.Concurrency, o, 0, done)
	if sweepErr != nil {
		return nil, fmt.Errorf("sweep: %w", sweepErr)
	}
	idle.run(ctx, cfg.Concurrency, o, slice, nil)
	ir, err := idle.result()
	if err != nil {
		return nil, fmt.Errorf("idem %s, idle: %w", cfg.Mode, err)
	}
	dr, err := during.result()
	if err != nil {
		return nil, fmt.Errorf("idem %s while sweeping: %w", cfg.Mode, err)
	}
	r := &SweepResult{Batch: batch, Swept: int64(swept), Seconds: took.Seconds(),
		IdleOpsPerSec: ir.rate, IdleP99ms: ir.p99, SweepingOpsPerSec: dr.rate, SweepingP99ms: dr.p99}
	if took > 0 {
		r.RowsPerSec = float64(swept) / took.Seconds()
	}
	if ir.p99 > 0 {
		r.P99Ratio = dr.p99 / ir.p99
	}
	return r, nil
}
