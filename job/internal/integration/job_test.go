package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/job"
	"github.com/idemgo/idem/store/memory"
)

func newJob(t *testing.T, s idem.Store, opts job.Options) *job.Job {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "hourly-report"
	}
	if opts.Schedule == nil {
		opts.Schedule = job.Every(time.Hour)
	}
	j, err := job.New(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

var tick = time.Date(2030, 1, 2, 15, 0, 0, 4e6, time.UTC) // the 15:00 tick, fired 4 ms late

func TestOptions(t *testing.T) {
	s := memory.New()
	for _, opts := range []job.Options{
		{Schedule: job.Every(time.Hour)},       // no name
		{Name: "report"},                       // no schedule
		{Name: "a\x00b", Schedule: job.Tick()}, // not a scope
		{Name: strings.Repeat("n", 201), Schedule: job.Tick()},
		{Name: "report", Schedule: job.Tick(), Lease: time.Millisecond},
		{Name: "report", Schedule: job.Tick(), Stale: idem.StaleReconcile},
		{Name: "report", Schedule: job.Tick(), Lease: time.Hour, Retention: time.Minute},
	} {
		if _, err := job.New(s, opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("New(%+v): %v, want ErrInvalidOptions", opts, err)
		}
	}
	if _, err := job.New(s, job.Options{Name: "report", Schedule: job.Tick()}); err != nil {
		t.Errorf("minimal options: %v", err)
	}
}

// Every trigger of one window after the first gets the recorded result and
// runs nothing; another window, or another job, runs.
func TestOncePerWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		var runs counter
		report := func(ctx context.Context, run *job.Run) ([]byte, error) {
			runs.inc(run.Key.Scope + " " + run.Window.ID())
			return []byte("orders=" + run.Window.Start.Format("15")), nil
		}
		j := newJob(t, s, job.Options{})
		for _, tk := range []time.Time{tick, tick.Add(42 * time.Minute), tick.Add(59*time.Minute + 59*time.Second),
			tick.In(time.FixedZone("CET", 3600))} {
			res, err := j.Run(ctx, tk, report)
			if err != nil || string(res.Value) != "orders=15" {
				t.Fatalf("tick %v: %+v, %v", tk, res, err)
			}
			if want := "2030-01-02T15:00:00Z/2030-01-02T16:00:00Z"; res.Window.ID() != want || res.Key.ID != want {
				t.Errorf("tick %v: window %s key %s, want %s", tk, res.Window, res.Key, want)
			}
		}
		if n := runs.get("hourly-report 2030-01-02T15:00:00Z/2030-01-02T16:00:00Z"); n != 1 {
			t.Errorf("the 15:00 window ran %d times, want 1", n)
		}
		again, err := j.Run(ctx, tick, report)
		if err != nil || again.Outcome != idem.OutcomeDuplicate || string(again.Value) != "orders=15" {
			t.Errorf("later trigger: %v %q %v, want duplicate with the recorded result", again.Outcome, again.Value, err)
		}

		next, err := j.Run(ctx, tick.Add(time.Hour), report)
		if err != nil || next.Outcome != idem.OutcomeProcessed || string(next.Value) != "orders=16" {
			t.Errorf("16:00 window: %v %q %v", next.Outcome, next.Value, err)
		}
		other := newJob(t, s, job.Options{Name: "daily-export"})
		if res, err := other.Run(ctx, tick, report); err != nil || res.Outcome != idem.OutcomeProcessed {
			t.Errorf("another job, same hour: %v %v, want its own run", res.Outcome, err)
		}
		// A schedule change is a new window, even at the same start.
		daily := newJob(t, s, job.Options{Schedule: job.Daily(nil)})
		if res, err := daily.Run(ctx, time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC), report); err != nil || res.Outcome != idem.OutcomeProcessed {
			t.Errorf("daily window starting at an hourly one's start: %v %v", res.Outcome, err)
		}
	})
}

// Two instances fire the same tick: one runs, the other returns at once
// while it runs and gets the result after.
func TestOverlappingTriggers(t *testing.T) {
	eachStore(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		a, b := newJob(t, s, job.Options{}), newJob(t, s, job.Options{})
		started, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
				close(started)
				<-finish
				return []byte("sent"), nil
			})
			done <- err
		}()
		within(t, started, "the first run")
		ran := false
		res, err := b.Run(ctx, tick.Add(time.Second), func(context.Context, *job.Run) ([]byte, error) {
			ran = true
			return nil, nil
		})
		var se *idem.StateError
		if !errors.Is(err, idem.ErrInProgress) || !errors.As(err, &se) || res.Outcome != idem.OutcomeInProgress || ran {
			t.Fatalf("second trigger while the first runs: %v %v ran=%v, want ErrInProgress without running", res.Outcome, err, ran)
		}
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		res, err = b.Run(ctx, tick, func(context.Context, *job.Run) ([]byte, error) { ran = true; return nil, nil })
		if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "sent" || ran {
			t.Errorf("second trigger after: %v %q %v ran=%v", res.Outcome, res.Value, err, ran)
		}
	})
}

// A run that crashes halfway keeps its window until its lease ends; then the
// next trigger takes it over and resumes after the last step done.
func TestCrashedRunResumes(t *testing.T) {
	eachStore(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		clk := newClock()
		proc := &crashable{Store: s}
		opts := job.Options{Clock: clk.Now, Lease: 30 * time.Second}
		a, b := newJob(t, proc, opts), newJob(t, s, opts)

		var calls counter
		var stepKeys []string
		steps := func(crashIn string) job.Func {
			return func(ctx context.Context, run *job.Run) ([]byte, error) {
				var out []string
				for _, name := range []string{"extract", "render", "publish"} {
					v, err := run.Step(ctx, name, func(ctx context.Context) ([]byte, error) {
						calls.inc(name)
						stepKeys = append(stepKeys, name+"="+idem.DeriveKey(ctx, "mail"))
						if name == crashIn {
							proc.crash() // killed mid-step: nothing more reaches the store
							return nil, errCrashed
						}
						return []byte(name + "-done"), nil
					})
					if err != nil {
						return nil, err
					}
					out = append(out, string(v))
				}
				return []byte(strings.Join(out, ",")), nil
			}
		}
		if _, err := a.Run(ctx, tick, steps("publish")); !errors.Is(err, errCrashed) {
			t.Fatalf("crashing run: %v", err)
		}
		// The crashed run's lease is live: the window is in progress.
		clk.Advance(20 * time.Second)
		if _, err := b.Run(ctx, tick, steps("")); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("trigger within the crashed run's lease: %v, want ErrInProgress", err)
		}
		clk.Advance(11 * time.Second)
		res, err := b.Run(ctx, tick, steps(""))
		if err != nil || !res.Retaken || res.Outcome != idem.OutcomeProcessed {
			t.Fatalf("trigger after the lease: %+v %v, want the window retaken", res, err)
		}
		if string(res.Value) != "extract-done,render-done,publish-done" {
			t.Errorf("result %q: the replayed steps' results are missing", res.Value)
		}
		if fmt.Sprint(res.Skipped) != "[extract render]" {
			t.Errorf("skipped %v, want the steps the crashed run finished", res.Skipped)
		}
		for name, want := range map[string]int{"extract": 1, "render": 1, "publish": 2} {
			if got := calls.get(name); got != want {
				t.Errorf("step %s ran %d times, want %d", name, got, want)
			}
		}
		// The step's downstream key is the same on its retry.
		if len(stepKeys) != 4 || stepKeys[2] != stepKeys[3] || stepKeys[0] == stepKeys[1] {
			t.Errorf("downstream keys %v: want one per step, stable across the retake", stepKeys)
		}
		if again, err := b.Run(ctx, tick, steps("")); err != nil || again.Outcome != idem.OutcomeDuplicate ||
			string(again.Value) != string(res.Value) {
			t.Errorf("after the resumed run: %v %q %v", again.Outcome, again.Value, err)
		}
	})
}

// A run that crashes in a step it renewed after its window finds the next
// run waiting out the step's lease, not failing.
func TestRetakenRunWaitsForStepLease(t *testing.T) {
	s := memory.New()
	clk := newClock()
	opts := job.Options{Clock: clk.Now, Lease: 30 * time.Second}
	proc := &crashable{Store: s}
	a, b := newJob(t, proc, opts), newJob(t, s, opts)
	_, err := a.Run(context.Background(), tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
		clk.Advance(25 * time.Second) // the step starts late in the window's lease
		return run.Step(ctx, "load", func(ctx context.Context) ([]byte, error) {
			proc.crash()
			return nil, errCrashed
		})
	})
	if !errors.Is(err, errCrashed) {
		t.Fatal(err)
	}
	// The window's lease has ended, the step's has 50 ms to go, and from
	// here time passes.
	clk.Advance(30*time.Second - 50*time.Millisecond)
	clk.Run()
	ran := 0
	res, err := b.Run(context.Background(), tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
		return run.Step(ctx, "load", func(context.Context) ([]byte, error) {
			ran++
			return []byte("loaded"), nil
		})
	})
	if err != nil || !res.Retaken || string(res.Value) != "loaded" || ran != 1 {
		t.Errorf("retaken run: %+v %v ran=%d", res, err, ran)
	}
}

// A run that outlives its lease, and its retention, keeps its window: the
// heartbeat renews it, and a renewed in-progress record never expires.
func TestHeartbeatKeepsLongRun(t *testing.T) {
	eachStore(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		clk := newClock()
		renewed := make(chan struct{}, 1)
		proc := &crashable{Store: s, renewed: renewed}
		// A short lease so that the heartbeat ticks (every Lease/3) within
		// the test; the test waits for the renewal, never for a duration.
		opts := job.Options{Clock: clk.Now, Lease: 600 * time.Millisecond, Retention: time.Hour}
		a, b := newJob(t, proc, opts), newJob(t, s, opts)
		inRun, finish := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := a.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
				clk.Advance(3 * time.Hour) // far past the first lease and the retention
				<-renewed                  // a renewal since: made at the new time
				close(inRun)
				<-finish
				return []byte("long"), ctx.Err()
			})
			done <- err
		}()
		within(t, inRun, "a renewal")
		if _, err := b.Run(ctx, tick, func(context.Context, *job.Run) ([]byte, error) {
			return nil, errors.New("ran over a live run")
		}); !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("trigger during a renewed long run: %v, want ErrInProgress", err)
		}
		close(finish)
		if err := <-done; err != nil {
			t.Fatalf("long run: %v", err)
		}
		if res, err := b.Run(ctx, tick, nil); err != nil || string(res.Value) != "long" {
			t.Errorf("after the long run: %v %q %v", res.Outcome, res.Value, err)
		}
	})
}

// A failed step gives the window back; the next trigger reruns from that
// step, with the earlier steps' results replayed.
func TestFailedStepRetried(t *testing.T) {
	eachStore(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		j := newJob(t, s, job.Options{})
		var calls counter
		fail := true
		fn := func(ctx context.Context, run *job.Run) ([]byte, error) {
			n, err := run.Step(ctx, "count", func(context.Context) ([]byte, error) {
				calls.inc("count")
				return []byte("7"), nil
			})
			if err != nil {
				return nil, err
			}
			_, err = run.Step(ctx, "send", func(context.Context) ([]byte, error) {
				calls.inc("send")
				if fail {
					return nil, errors.New("smtp: 451 try again")
				}
				return nil, nil
			})
			if err != nil {
				return nil, err
			}
			return []byte(fmt.Sprintf("sent %s, skipped %v", n, run.Skipped())), nil
		}
		res, err := j.Run(ctx, tick, fn)
		if err == nil || !strings.Contains(err.Error(), `step "send"`) || res.Outcome != idem.OutcomeFailed {
			t.Fatalf("failing run: %v %v", res.Outcome, err)
		}
		fail = false
		res, err = j.Run(ctx, tick, fn)
		if err != nil || string(res.Value) != "sent 7, skipped [count]" {
			t.Fatalf("retry: %q %v", res.Value, err)
		}
		if calls.get("count") != 1 || calls.get("send") != 2 {
			t.Errorf("count ran %d, send %d; want 1 and 2", calls.get("count"), calls.get("send"))
		}
	})
}

// A step result too large to record fails the step, rather than leave a
// resumed run without it.
func TestStepResultTooLarge(t *testing.T) {
	j := newJob(t, memory.New(), job.Options{MaxResultSize: 4})
	calls := 0
	fn := func(ctx context.Context, run *job.Run) ([]byte, error) {
		return run.Step(ctx, "extract", func(context.Context) ([]byte, error) {
			calls++
			return []byte("12345"), nil
		})
	}
	for range 2 {
		if _, err := j.Run(context.Background(), tick, fn); !errors.Is(err, idem.ErrResultTooLarge) {
			t.Fatalf("large step result: %v", err)
		}
	}
	if calls != 2 {
		t.Errorf("step ran %d times: a failed step is retried", calls)
	}
}

func TestStepNames(t *testing.T) {
	j := newJob(t, memory.New(), job.Options{})
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	for _, names := range [][]string{{""}, {"a", "a"}} {
		_, err := j.Run(context.Background(), tick.Add(time.Duration(len(names))*time.Hour), func(ctx context.Context, run *job.Run) ([]byte, error) {
			for _, n := range names {
				if _, err := run.Step(ctx, n, nop); err != nil {
					return nil, err
				}
			}
			return nil, nil
		})
		if !errors.Is(err, job.ErrStepName) {
			t.Errorf("steps %q: %v, want ErrStepName", names, err)
		}
	}
}

// Step keys are stable for a window and distinct across steps, windows and
// jobs; the step's context carries its key.
func TestStepKeys(t *testing.T) {
	s := memory.New()
	keys := map[string]string{}
	for _, name := range []string{"report", "export"} {
		j := newJob(t, s, job.Options{Name: name})
		for _, tk := range []time.Time{tick, tick.Add(time.Hour)} {
			_, err := j.Run(context.Background(), tk, func(ctx context.Context, run *job.Run) ([]byte, error) {
				for _, step := range []string{"a", "b"} {
					_, err := run.Step(ctx, step, func(ctx context.Context) ([]byte, error) {
						k, _ := idem.KeyFromContext(ctx)
						if k != run.StepKey(step) || k.Scope != name || !strings.HasPrefix(k.ID, "idem-") {
							t.Errorf("step context key %v, StepKey %v", k, run.StepKey(step))
						}
						if want := run.Key.Derive("step/" + step); k.ID != want {
							t.Errorf("step key %s, want the window key's derivation %s", k.ID, want)
						}
						keys[name+tk.Format("15")+step] = k.ID
						return nil, nil
					})
					if err != nil {
						return nil, err
					}
				}
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[string]string{}
	for where, k := range keys {
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s share step key %s", where, other, k)
		}
		seen[k] = where
	}
	if len(keys) != 8 {
		t.Errorf("%d step keys, want 8", len(keys))
	}
}

func TestParkedCrash(t *testing.T) {
	clk := newClock()
	s := memory.New()
	proc := &crashable{Store: s}
	opts := job.Options{Clock: clk.Now, Stale: idem.StalePark}
	a, b := newJob(t, proc, opts), newJob(t, s, opts)
	a.Run(context.Background(), tick, func(context.Context, *job.Run) ([]byte, error) {
		proc.crash()
		return nil, errCrashed
	})
	clk.Advance(time.Hour)
	if res, err := b.Run(context.Background(), tick, nil); !errors.Is(err, idem.ErrStale) || res.Outcome != idem.OutcomeStale {
		t.Errorf("parked: %v %v, want ErrStale", res.Outcome, err)
	}
}

func TestBackfill(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, memory.New(), job.Options{})
	var ran []string
	fn := func(ctx context.Context, run *job.Run) ([]byte, error) {
		ran = append(ran, run.Window.Start.Format("15"))
		if run.Window.Start.Hour() == 18 {
			return nil, errors.New("boom")
		}
		return nil, nil
	}
	if _, err := j.Run(ctx, tick.Add(time.Hour), fn); err != nil { // 16:00 ran on time
		t.Fatal(err)
	}
	res, err := j.Backfill(ctx, tick, tick.Add(5*time.Hour), fn)
	if err == nil || len(res) != 4 || strings.Join(ran, " ") != "16 15 17 18" {
		t.Errorf("backfill: %d results, %v, ran %v; want 15 and 17 run, 16 skipped, stop at 18", len(res), err, ran)
	}
	if res[1].Outcome != idem.OutcomeDuplicate {
		t.Errorf("16:00 in the backfill: %v", res[1].Outcome)
	}
	cron := newJob(t, memory.New(), job.Options{Schedule: job.Tick()})
	if _, err := cron.Backfill(ctx, tick, tick.Add(time.Hour), fn); !errors.Is(err, job.ErrNoWindow) {
		t.Errorf("backfill of a tick schedule: %v", err)
	}
}

func TestNoWindow(t *testing.T) {
	j := newJob(t, memory.New(), job.Options{Schedule: job.ScheduleFunc(func(time.Time) job.Window { return job.Window{} })})
	if _, err := j.Run(context.Background(), tick, nil); !errors.Is(err, job.ErrNoWindow) {
		t.Errorf("zero window: %v", err)
	}
	backwards := job.Window{Start: tick, End: tick.Add(-time.Hour)}
	if _, err := j.RunWindow(context.Background(), backwards, nil); !errors.Is(err, job.ErrNoWindow) {
		t.Errorf("window ending before its start: %v", err)
	}
}
