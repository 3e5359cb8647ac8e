package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
)

// ErrNoWindow means a run was asked for a window without a start (a
// ScheduleFunc that returned the zero Window) or that ends before it starts.
var ErrNoWindow = errors.New("job: window has no start")

// Options configure a Job. Name and Schedule are required; the zero value of
// every other field is a sensible default.
type Options struct {
	// Name is the job's identity and the scope of its records: two jobs
	// with different names never block each other, two instances of one
	// job share its windows. Put the service in it when several services
	// share a store ("billing.hourly-report").
	Name string
	// Schedule maps a tick to its window: Every(time.Hour), Daily(loc),
	// Monthly(loc), Tick() for cron ticks, or a ScheduleFunc.
	Schedule Schedule
	// Lease is how long a run holds its window without renewal; runs
	// renew it every Lease/3 while they work, so a run may last any time,
	// and a crashed run's window is retaken Lease after its last renewal.
	// Default idem.DefaultLease (30s).
	Lease time.Duration
	// Retention is how long a finished window's record (and its result) is
	// kept: a trigger of the window after that runs it again. Keep it
	// longer than any backfill reaches back, and than a crashed run may
	// wait for the trigger that retakes it (its finished steps are kept
	// Retention past its last renewal). Default idem.DefaultRetention
	// (7 days).
	Retention time.Duration
	// Stale says what a trigger does with a window whose run crashed (its
	// lease ended): retake it and run again, skipping the steps recorded
	// as done (idem.StaleRetake), ask Reconcile, or leave it to an
	// operator (idem.StalePark: ErrStale). Steps follow the same policy.
	//
	// The default here is idem.StaleRetake, not the guard's park, with
	// Reconcile unset: a run resumes after its last finished step, so a
	// retake repeats at most the step the crash interrupted. Split a step
	// whose effect must not repeat (a payment) into its own Step with a
	// key derived with idem.DeriveKey downstream, or choose StalePark or
	// StaleReconcile. With Reconcile set, the default is StaleReconcile.
	Stale idem.StalePolicy
	// Reconcile is required with idem.StaleReconcile.
	Reconcile idem.ReconcileFunc
	// MaxResultSize bounds the result recorded for a window or a step.
	// Default idem.DefaultMaxResultSize; negative: none is recorded.
	MaxResultSize int
	// Observer hears of every window and step (their keys are the job's
	// and the step's), as for any guard.
	Observer idem.Observer
	// Clock returns the current time, for leases and retention only: the
	// window comes from the tick, never from the clock. Default time.Now.
	Clock func() time.Time
	// StoreTimeout bounds the writes that finish a run after its context
	// ended. Default 10s.
	StoreTimeout time.Duration
}

// Job runs a named job at most once per window of its schedule, whichever
// instance, scheduler or retry triggers it. It is safe for concurrent use.
type Job struct {
	name  string
	sched Schedule
	g     *idem.Guard
	keep  idem.Retainer // the store, when it can keep finished steps; nil: steps are refused
}

// New returns a job whose records are kept in store (any idem.Store: a
// run's lease is a two-phase record). Options are checked here; the error
// wraps idem.ErrInvalidOptions.
func New(store idem.Store, opts Options) (*Job, error) {
	if opts.Name == "" {
		return nil, fmt.Errorf("%w: job Name is required (it scopes the job's records)", idem.ErrInvalidOptions)
	}
	if opts.Schedule == nil {
		return nil, fmt.Errorf("%w: job %q has no Schedule (job.Every(time.Hour), job.Daily(loc), job.Tick(), ...)",
			idem.ErrInvalidOptions, opts.Name)
	}
	stale := opts.Stale
	if stale == idem.StaleDefault && opts.Reconcile == nil {
		stale = idem.StaleRetake // see Options.Stale: a run resumes after its last finished step
	}
	g, err := idem.New(store, idem.Options{
		Scope:         opts.Name,
		Fingerprint:   idem.NoFingerprint,
		Lease:         opts.Lease,
		Retention:     opts.Retention,
		Stale:         stale,
		Reconcile:     opts.Reconcile,
		MaxResultSize: opts.MaxResultSize,
		Observer:      opts.Observer,
		Clock:         opts.Clock,
		StoreTimeout:  opts.StoreTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", opts.Name, err)
	}
	keep, _ := store.(idem.Retainer)
	return &Job{name: opts.Name, sched: opts.Schedule, g: g, keep: keep}, nil
}

// Name returns the job's name.
func (j *Job) Name() string { return j.name }

// Window returns the window of tick under the job's schedule.
func (j *Job) Window(tick time.Time) Window { return j.sched.Window(tick) }

// Key returns the key of w's record: the job's name as scope, the window's
// ID as id.
func (j *Job) Key(w Window) idem.Key { return idem.Key{Scope: j.name, ID: w.ID()} }

// Func is the job's work for one window. It returns the result to record (a
// summary, row counts; replayed to every later trigger of the window). Its
// context is cancelled with cause idem.ErrLeaseLost if another instance took
// the window over; split long work into run.Step calls so that a retaken
// run resumes after the last step that finished.
type Func func(ctx context.Context, run *Run) ([]byte, error)

// Result is what a trigger of a window found or did.
type Result struct {
	idem.Result
	Window Window
	// Skipped names the steps this trigger's run found done by an earlier
	// run of the window (one that crashed or failed), in call order.
	Skipped []string
}

// Run runs fn for the window of tick (the time the scheduler fired for,
// which every instance agrees on; never the clock read as the run starts).
//
// One trigger of a window runs fn; the others return at once:
//
//   - done before: fn is skipped, the recorded result is in Value
//     (Outcome idem.OutcomeDuplicate, nil error);
//   - running elsewhere (its lease is live): an error wrapping
//     idem.ErrInProgress (*idem.StateError, whose Record says until when
//     at least); do nothing, the holder is on it;
//   - crashed elsewhere (its lease ended): taken over (Retaken), fn runs
//     again and its steps recorded as done are skipped; with
//     idem.StalePark, an error wrapping idem.ErrStale instead.
//
// fn's error is returned and the window is given back, so the next trigger
// runs it again (from the step that failed). The lease is renewed while fn
// runs.
func (j *Job) Run(ctx context.Context, tick time.Time, fn Func) (Result, error) {
	return j.RunWindow(ctx, j.sched.Window(tick), fn)
}

// RunWindow is Run for a window computed by the caller.
func (j *Job) RunWindow(ctx context.Context, w Window, fn Func) (Result, error) {
	if w.Start.IsZero() || (!w.End.IsZero() && !w.End.After(w.Start)) {
		return Result{Window: w}, fmt.Errorf("%w: %s", ErrNoWindow, w)
	}
	key := j.Key(w)
	var run *Run
	res, err := j.g.DoKey(ctx, key, "", func(ctx context.Context) ([]byte, error) {
		run = &Run{job: j, Window: w, Key: key, steps: map[string]bool{}, keeper: keeper{ctx: ctx}}
		defer run.stopKeeping()
		return fn(ctx, run)
	})
	out := Result{Result: res, Window: w}
	if run != nil {
		out.Skipped = run.Skipped()
	}
	return out, err
}

// Backfill runs fn for every window of the schedule from the one holding
// from up to the one holding to (included), oldest first: after an outage,
// the windows no trigger ran are run, and those done before cost one claim
// each. It stops at the first window that returns an error (one in progress
// elsewhere too), so windows never run out of order, and returns the results
// so far with that error.
//
// The window after w is the schedule's window of w.End, as with Every,
// Daily and Monthly, whose windows hold their ticks. Schedules whose
// windows have no end (Tick) cannot be walked (ErrNoWindow), nor can a
// ScheduleFunc whose window of w.End is not after w (an error).
func (j *Job) Backfill(ctx context.Context, from, to time.Time, fn Func) ([]Result, error) {
	var out []Result
	w := j.sched.Window(from)
	if w.End.IsZero() {
		return nil, fmt.Errorf("%w: the schedule's windows have no end to walk from", ErrNoWindow)
	}
	for !w.Start.After(to) {
		res, err := j.RunWindow(ctx, w, fn)
		out = append(out, res)
		if err != nil {
			return out, err
		}
		n := j.sched.Window(w.End)
		if n.End.IsZero() || !n.Start.After(w.Start) {
			return out, fmt.Errorf("job %q: schedule gave window %s after %s", j.name, n, w)
		}
		w = n
	}
	return out, nil
}
