package job

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// ErrStepName means a step was named "" or twice in one run: step names are
// what a resumed run finds its recorded steps by, so each must be unique and
// the same on every run.
var ErrStepName = errors.New("job: step name empty or repeated")

// Run is one run of a job for a window, handed to its Func.
type Run struct {
	// Window is the window this run is for.
	Window Window
	// Key is the window's record key (scope: the job's name); downstream
	// keys derive from it (Key.Derive, or idem.DeriveKey on the run's
	// context).
	Key idem.Key

	job     *Job
	mu      sync.Mutex
	steps   map[string]bool
	skipped []string
	keeper  // the finished steps, kept as long as the run (retain.go)
}

// Step runs fn as the step called name of this run, at most once per window:
// its completion and result are recorded under a key derived from the run's
// (StepKey), so a run resumed after a crash or a failure returns the
// recorded result at once instead of running fn again, and the run goes on
// from the first step not done. Steps are the recovery points of a long job
// (the atomic phases of Brandur Leach's idempotency keys): put every effect
// that must not repeat in a step of its own, in the same order on every run.
//
// fn's context carries the step's key, so idem.DeriveKey(ctx, "send") gives
// the key to pass to a downstream service for this step: the same on every
// attempt of it, another for every step, window and job. The step's lease
// is renewed while fn runs.
//
// An error from fn gives the step back and is returned: return it from the
// job's Func, and the next trigger runs this step again. So is a result
// over Options.MaxResultSize (idem.ErrResultTooLarge): the result is what a
// resumed run gets back, so keep it small (a count, a path, an id). A step still held
// by another owner (the run this one took over, which renewed the step
// after its last renewal of the window) is waited for until its lease
// ends, up to two leases: the run holds the window, so that owner has
// crashed or is stopping. After that the error wraps idem.ErrInProgress.
func (r *Run) Step(ctx context.Context, name string, fn idem.Handler) ([]byte, error) {
	r.mu.Lock()
	if name == "" || r.steps[name] {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %q in job %q", ErrStepName, name, r.job.name)
	}
	r.steps[name] = true
	r.mu.Unlock()
	if r.job.keep == nil {
		// Without a Retainer a finished step's record would expire
		// Retention after it finished even while its run lives on, and a
		// retake after that would do the step again: refused before any
		// effect rather than repeated silently.
		return nil, fmt.Errorf("job %q, window %s, step %q: %w", r.job.name, r.Window, name, idem.ErrRetainUnsupported)
	}
	key := r.StepKey(name)
	res, err := r.do(ctx, key, r.bounded(fn))
	if err != nil {
		return res.Value, fmt.Errorf("job %q, window %s, step %q: %w", r.job.name, r.Window, name, err)
	}
	skipped := res.Outcome == idem.OutcomeDuplicate
	if skipped {
		r.mu.Lock()
		r.skipped = append(r.skipped, name)
		r.mu.Unlock()
	}
	r.finished(key, res.Record.Token, skipped)
	return res.Value, nil
}

// bounded refuses a step result too large to record before the step is
// completed: a resumed run gets the recorded result back, and one recorded
// without it would hand the steps after it nothing.
func (r *Run) bounded(fn idem.Handler) idem.Handler {
	limit := r.job.g.Options().MaxResultSize
	return func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err == nil && limit >= 0 && len(v) > limit {
			return nil, fmt.Errorf("%w: the step returned %d bytes, MaxResultSize is %d (return a reference to the data, not the data)",
				idem.ErrResultTooLarge, len(v), limit)
		}
		return v, err
	}
}

// StepKey is the key of the step called name: in the job's scope, with the
// id the run's key derives for "step/"+name (idem.Key.Derive), so it is the
// same on every run of the window, on every instance, and differs between
// steps, windows and jobs. The id itself ("idem-" and 40 hex digits) can be
// passed downstream as an idempotency key.
func (r *Run) StepKey(name string) idem.Key {
	return idem.Key{Scope: r.Key.Scope, ID: r.Key.Derive("step/" + name)}
}

// Skipped returns the names of the steps of this run that were done before
// (by an earlier run of the window that crashed or failed), in call order.
func (r *Run) Skipped() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.skipped...)
}

// do runs the step, waiting out a step lease held by the run this one took
// the window over from: a crashed run's step may have been renewed after its
// window was, so its lease can end up to a third of a lease later.
func (r *Run) do(ctx context.Context, key idem.Key, fn idem.Handler) (idem.Result, error) {
	opts := r.job.g.Options()
	waited := time.Duration(0)
	for {
		res, err := r.job.g.DoKey(ctx, key, "", fn)
		var se *idem.StateError
		if !errors.As(err, &se) || !errors.Is(err, idem.ErrInProgress) {
			return res, err
		}
		d := se.Record.LeaseUntil.Sub(opts.Clock())
		if d < 10*time.Millisecond {
			d = 10 * time.Millisecond
		}
		if waited+d > 2*opts.Lease {
			return res, err
		}
		waited += d
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}
