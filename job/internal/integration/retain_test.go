package integration_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/job"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/sqlite"
)

// eachStoreAndSQLite is eachStore with the embedded SQLite store too.
func eachStoreAndSQLite(t *testing.T, test func(t *testing.T, store idem.Store)) {
	eachStore(t, test)
	t.Run("sqlite", func(t *testing.T) {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		test(t, s)
	})
}

// waitFor reads ch until it gives a request made at or after at (one made
// before may still be in flight when the clock moves).
func waitFor[R any](t *testing.T, ch <-chan R, now func(R) time.Time, at time.Time, what string) R {
	t.Helper()
	timeout := time.After(20 * time.Second) // a guard against a hang, not a measure
	for {
		select {
		case r := <-ch:
			if !now(r).Before(at) {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s made at %v or later", what, at)
		}
	}
}

// A run with steps a and b finishes a, lives three times its retention with
// its lease renewed, and crashes: step a's record, completed with one
// retention, is kept with the run, so the run that retakes the window skips
// a (its side effect happened once) and does b.
func TestLongRunCrashKeepsSteps(t *testing.T) {
	eachStoreAndSQLite(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		clk := newClock()
		proc := &crashable{Store: s, retained: make(chan idem.RetainRequest, 8), renewals: make(chan idem.RenewRequest, 8)}
		// A short lease so that renewals (every Lease/3) happen within the
		// test; the test waits for them, never for a duration.
		opts := job.Options{Clock: clk.Now, Lease: 600 * time.Millisecond, Retention: time.Hour}
		a, b := newJob(t, proc, opts), newJob(t, s, opts)
		var effects counter
		work := func(crash bool) job.Func {
			return func(ctx context.Context, run *job.Run) ([]byte, error) {
				av, err := run.Step(ctx, "a", func(ctx context.Context) ([]byte, error) {
					effects.inc("a")
					return []byte("a-done"), nil
				})
				if err != nil {
					return nil, err
				}
				if crash {
					// Three retentions pass, half a retention at a time
					// (step a's record was completed to expire after
					// one), each with a renewal of the window and a
					// retain of the step made at the new time.
					for range 6 {
						clk.Advance(opts.Retention / 2)
						later := clk.Now()
						waitFor(t, proc.renewals, func(r idem.RenewRequest) time.Time { return r.Now }, later, "renewal of the window")
						r := waitFor(t, proc.retained, func(r idem.RetainRequest) time.Time { return r.Now }, later, "retain of step a")
						if r.Key != run.StepKey("a") || !r.ExpiresAt.Equal(r.Now.Add(opts.Retention)) {
							t.Errorf("retained %v until %v at %v, want step a until the clock plus the retention", r.Key, r.ExpiresAt, r.Now)
						}
					}
					proc.crash() // killed: nothing more reaches the store
					return nil, errCrashed
				}
				bv, err := run.Step(ctx, "b", func(ctx context.Context) ([]byte, error) {
					effects.inc("b")
					return []byte("b-done"), nil
				})
				return []byte(string(av) + "," + string(bv)), err
			}
		}
		if _, err := a.Run(ctx, tick, work(true)); !errors.Is(err, errCrashed) {
			t.Fatalf("crashing run: %v", err)
		}
		clk.Advance(time.Minute) // past the crashed run's lease
		res, err := b.Run(ctx, tick, work(false))
		if err != nil || !res.Retaken || string(res.Value) != "a-done,b-done" || fmt.Sprint(res.Skipped) != "[a]" {
			t.Fatalf("retake: %+v %v, want the window retaken, step a skipped", res, err)
		}
		if n := effects.get("a"); n != 1 {
			t.Errorf("step a's side effect happened %d times, want once", n)
		}
		if n := effects.get("b"); n != 1 {
			t.Errorf("step b ran %d times, want once", n)
		}
	})
}

// The run that takes a window over retains the steps it skips at once: the
// crashed run kept them only until its last renewal plus the retention.
func TestRetakeRetainsSkippedSteps(t *testing.T) {
	eachStoreAndSQLite(t, func(t *testing.T, s idem.Store) {
		ctx := context.Background()
		clk := newClock()
		proc := &crashable{Store: s}
		opts := job.Options{Clock: clk.Now, Lease: 30 * time.Second, Retention: time.Hour}
		a, b := newJob(t, proc, opts), newJob(t, s, opts)
		var stepKey idem.Key
		_, err := a.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
			stepKey = run.StepKey("a")
			if _, err := run.Step(ctx, "a", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
				return nil, err
			}
			proc.crash()
			return nil, errCrashed
		})
		if !errors.Is(err, errCrashed) {
			t.Fatal(err)
		}
		clk.Advance(50 * time.Minute) // the lease ended; step a's retention has 10 minutes left
		res, err := b.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
			if _, err := run.Step(ctx, "a", func(context.Context) ([]byte, error) { return nil, errors.New("ran again") }); err != nil {
				return nil, err
			}
			r, err := s.Get(ctx, stepKey)
			if err != nil {
				return nil, err
			}
			if want := clk.Now().Add(opts.Retention); r.ExpiresAt.Before(want.Add(-time.Millisecond)) {
				t.Errorf("skipped step a kept until %v, want %v (the retake's clock plus the retention)", r.ExpiresAt, want)
			}
			return nil, nil
		})
		if err != nil || !res.Retaken {
			t.Fatalf("retake: %+v %v", res, err)
		}
	})
}

// plainStore hides every capability of its store but idem.Store's own
// methods, as a wrapper that forwards nothing else does.
type plainStore struct{ idem.Store }

// A store that cannot retain refuses steps before they run (a finished
// step's record could expire under its live run, and its effect happen
// again); a job without steps runs on any store.
func TestStepsNeedRetainer(t *testing.T) {
	j := newJob(t, plainStore{memory.New()}, job.Options{})
	ran := false
	_, err := j.Run(context.Background(), tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
		return run.Step(ctx, "a", func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	})
	if !errors.Is(err, idem.ErrRetainUnsupported) || ran {
		t.Errorf("step on a store without Retainer: %v ran=%v, want ErrRetainUnsupported before running", err, ran)
	}
	res, err := j.Run(context.Background(), tick.Add(time.Hour), func(context.Context, *job.Run) ([]byte, error) {
		return []byte("no steps"), nil
	})
	if err != nil || string(res.Value) != "no steps" {
		t.Errorf("job without steps on a store without Retainer: %q %v", res.Value, err)
	}
}
