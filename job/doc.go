// Package job runs scheduled and multi-step jobs once per scheduled window:
// two schedulers firing the same tick, a deploy overlap, a retry of a run
// that crashed halfway all come down to one run of the window, resumed from
// its last finished step.
//
// # Windows
//
// A job is keyed by its name and the window of its schedule that a tick
// falls in: Every(time.Hour) maps the ticks 15:00:00.004 and 15:42 to the
// window 15:00-16:00, so a late or repeated trigger finds the same record.
// The window comes from the tick the scheduler fired for, never from the
// clock at start: a run that starts at 16:00:01 for the 15:00 window is
// still the 15:00 run. The record is (scope: the job's name, id: the
// window's ID), so jobs never block each other.
//
//	j, err := job.New(store, job.Options{Name: "hourly-report", Schedule: job.Every(time.Hour)})
//	res, err := j.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
//		return buildReport(ctx, run.Window)
//	})
//	switch {
//	case errors.Is(err, idem.ErrInProgress): // another instance is running this window: nothing to do
//	case err != nil: // failed: the window is given back, the next trigger runs it again
//	case res.Outcome == idem.OutcomeDuplicate: // done before; res.Value is its recorded result
//	}
//
// One trigger runs the window; the others return at once, with the recorded
// result when it is done or idem.ErrInProgress while it runs. A run's lease
// is renewed while it works (every Lease/3), so a job may run for hours; a
// run that crashes stops renewing, and the first trigger after its lease
// ends takes the window over (Result.Retaken). The result the job returns (a
// summary, row counts) is recorded with the window and handed to every later
// trigger of it.
//
// # Steps
//
// A long job is a sequence of steps, each a recovery point: Run.Step records
// a step's completion and result under a key derived from the window's
// (Run.StepKey), so a run that takes over from a crashed one, or the retry of
// a failed one, returns the recorded results of the steps already done and
// goes on from the first that is not. A step's context carries its own key:
// idem.DeriveKey(ctx, "send") inside the step is the idempotency key to give
// a downstream service for that step's side effect, the same on every
// attempt of the step and different for every other step, window and job.
//
//	res, err := j.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
//		rows, err := run.Step(ctx, "extract", extract)  // skipped once done: its result is replayed
//		if err != nil {
//			return nil, err
//		}
//		if _, err := run.Step(ctx, "publish", func(ctx context.Context) ([]byte, error) {
//			return nil, mailer.Send(ctx, idem.DeriveKey(ctx, "mail"), rows) // the provider dedups a repeat
//		}); err != nil {
//			return nil, err
//		}
//		return rows, nil
//	})
//
// A finished step's record lives as long as its run: while the run works,
// its finished steps are retained with the window's renewals (every
// Lease/3, until the clock plus Retention; idem.Retainer), so a run that
// lives longer than Retention and then crashes is resumed after its last
// finished step, never redone. A crashed run's steps are kept Retention
// past its last renewal, and the run that takes the window over keeps those
// it skips. On a store that cannot retain (not an idem.Retainer, or a
// wrapper that does not forward Retain), Step fails with
// idem.ErrRetainUnsupported before running anything.
//
// Steps must be called in the same order with the same names on every run
// of a window. A step is effectively once when its effect is a write the
// step's key deduplicates downstream, or is itself idempotent; a crash
// between a step's effect and its record runs that one step again.
//
// # Backfill
//
// Backfill runs every window between two instants that is not done yet,
// oldest first: after an outage, a scheduler calls it with the time it was
// down from, and windows done before cost one claim each.
//
// The job's records live in any idem.Store (an idem.Retainer for steps: every
// store of this module is one), which keeps a window's record for
// Options.Retention and never expires one in progress. The package imports
// the standard library and idem only.
package job
