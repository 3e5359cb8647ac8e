package job

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// keeper keeps a run's finished steps as long as the run: a step's record
// is completed with the job's Retention, and a run may live longer than
// that (its window's record, in progress, never expires). Were a step's
// record to expire while its run lives, a run that then crashed would be
// retaken without it, and the step's effect would happen again. So while
// the run works, every Lease/3 (the cadence of the window's own renewals),
// each finished step is retained (idem.Retainer) until the clock plus
// Retention; a run that crashes leaves its steps kept Retention past its
// last renewal, and the run that takes the window over retains the steps
// it skips at once and from then on.
type keeper struct {
	ctx     context.Context // the run's (the window's handler context)
	kmu     sync.Mutex
	done    []finishedStep
	stopped bool          // the run has returned: no loop starts
	stop    chan struct{} // closed by stopKeeping; nil until a step finished
	exited  chan struct{} // closed when the loop has returned
}

// finishedStep is a step's record as its completion left it.
type finishedStep struct {
	key   idem.Key
	token int64
}

// finished notes that the step recorded under key (completed under token)
// is done, starting the loop that keeps the run's steps on the first. A
// step skipped because an earlier run did it is retained at once: the
// crashed run stopped keeping it at its last renewal.
func (r *Run) finished(key idem.Key, token int64, skipped bool) {
	st := finishedStep{key: key, token: token}
	r.kmu.Lock()
	r.done = append(r.done, st)
	if r.stop == nil && !r.stopped {
		r.stop, r.exited = make(chan struct{}), make(chan struct{})
		go r.keepLoop(r.stop, r.exited)
	}
	r.kmu.Unlock()
	if skipped {
		opts := r.job.g.Options()
		now := opts.Clock()
		if r.retain(st, now, now.Add(opts.Retention)) {
			r.forget(st)
		}
	}
}

// keepLoop retains the finished steps every Lease/3 until stop is closed
// or the run's context ends (the run returned, or lost its window).
func (r *Run) keepLoop(stop, exited chan struct{}) {
	defer close(exited)
	t := time.NewTicker(r.job.g.Options().Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.retainAll()
		}
	}
}

// retainAll retains every finished step until the clock plus Retention.
func (r *Run) retainAll() {
	r.kmu.Lock()
	steps := append([]finishedStep(nil), r.done...)
	r.kmu.Unlock()
	opts := r.job.g.Options()
	now := opts.Clock()
	until := now.Add(opts.Retention)
	for _, st := range steps {
		if r.retain(st, now, until) {
			r.forget(st)
		}
	}
}

// retain keeps st's record until at least until and reports whether the
// record is gone (expired or taken by another claim: nothing more to
// keep). A failure is told to the Observer (a StepObserver's step "retain");
// a transient one is tried again at the next round.
func (r *Run) retain(st finishedStep, now, until time.Time) (gone bool) {
	opts := r.job.g.Options()
	ctx, cancel := context.WithTimeout(r.ctx, opts.StoreTimeout)
	err := r.job.keep.Retain(ctx, idem.RetainRequest{Key: st.key, Token: st.token, Now: now, ExpiresAt: until})
	cancel()
	if err != nil && r.ctx.Err() == nil {
		if so, ok := opts.Observer.(idem.StepObserver); ok {
			so.ObserveStep(r.ctx, idem.Step{Key: st.key, Op: "retain", Token: st.token, Err: err,
				CorrelationID: idem.CorrelationFromContext(r.ctx)})
		}
	}
	return errors.Is(err, idem.ErrNotFound) || errors.Is(err, idem.ErrLeaseLost)
}

// forget drops st from the steps kept.
func (r *Run) forget(st finishedStep) {
	r.kmu.Lock()
	defer r.kmu.Unlock()
	for i, d := range r.done {
		if d == st {
			r.done = append(r.done[:i], r.done[i+1:]...)
			return
		}
	}
}

// stopKeeping ends the loop when the run returns, and waits for it: no
// retain outlives the run.
func (r *Run) stopKeeping() {
	r.kmu.Lock()
	r.stopped = true
	stop, exited := r.stop, r.exited
	r.kmu.Unlock()
	if stop != nil {
		close(stop)
		<-exited
	}
}
