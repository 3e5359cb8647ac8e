package consume

import (
	"context"
	"errors"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// Driver runs deliveries of type M through a guard and decides, for a key
// in progress elsewhere, whether the delivery is held by the consumer and
// claimed again (spending none of the broker's deliveries) or handed back to
// the broker. It is shared by the broker integrations whose broker counts
// every redelivery toward a limit (JetStream MaxDeliver, quorum queues'
// delivery-limit).
type Driver[M any] struct {
	Handler broker.Handler[M]
	Guard   *idem.Guard
	// Backoff is the broker integration's back-off by attempt. A held
	// delivery is claimed again after Backoff(round), at the latest when
	// the holder's lease ends (idem.RetryAfter), so that a holder that
	// finishes early is seen early.
	Backoff func(attempt int) time.Duration
	// MaxHold bounds how long one delivery is held while its key is in
	// progress elsewhere: it is claimed a last time at MaxHold. Zero or
	// negative: never held. The broker's last allowed delivery is held
	// regardless, without bound.
	MaxHold time.Duration
}

// Pending is one delivery on its way to its broker action: the guard's
// answer to its latest claim and how long it has been held.
type Pending[M any] struct {
	Msg     M
	Message idem.Message // the guard's view of Msg
	Attempt int          // the broker's delivery count, 1 for the first
	// Last marks the broker's last allowed delivery: a retry would be
	// dropped or dead-lettered by the broker, so a key in progress
	// elsewhere is held for as long as it takes (until the context ends),
	// never handed back.
	Last bool

	Result idem.Result // the latest claim's result
	Err    error       // the latest claim's error

	start  time.Time // when the first hold began
	rounds int
}

// Held is how long p has been held so far, in progress elsewhere.
func (p *Pending[M]) Held() time.Duration {
	if p.start.IsZero() {
		return 0
	}
	return time.Since(p.start)
}

// WasHeld reports whether p was held at all.
func (p *Pending[M]) WasHeld() bool { return !p.start.IsZero() }

// minPoll keeps a held delivery from claiming in a tight loop when the
// back-off is zero.
const minPoll = 10 * time.Millisecond

// Claim runs the handler for p once under the guard. held reports that p's
// key is in progress elsewhere and that p should be kept: claimed again
// after wait. Otherwise p carries its outcome for the broker action.
func (d *Driver[M]) Claim(ctx context.Context, p *Pending[M]) (wait time.Duration, held bool) {
	p.Result, p.Err = d.Handler.Run(ctx, d.Guard, p.Message, p.Msg)
	if (d.MaxHold <= 0 && !p.Last) || ctx.Err() != nil || !errors.Is(p.Err, idem.ErrInProgress) {
		return 0, false
	}
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.rounds++
	wait = max(min(d.Backoff(p.rounds), d.RetryDelay(p)), minPoll)
	if !p.Last {
		// The last claim is at MaxHold, so a delivery handed back was held
		// that long (no quick round trips through the broker).
		left := d.MaxHold - p.Held()
		if left <= 0 {
			return 0, false
		}
		wait = min(wait, left)
	}
	return wait, true
}

// Drive claims p until it is not held, waiting between claims. The wait
// ends early when stop is closed (the consumer shuts down), or for the
// last delivery when ctx ends; p then keeps its in-progress outcome and the
// broker retries it.
func (d *Driver[M]) Drive(ctx context.Context, stop <-chan struct{}, p *Pending[M]) {
	wait, held := d.Claim(ctx, p)
	d.Resume(ctx, stop, p, wait, held)
}

// Resume is Drive for a delivery already claimed once: held and wait are
// what the last Claim returned.
func (d *Driver[M]) Resume(ctx context.Context, stop <-chan struct{}, p *Pending[M], wait time.Duration, held bool) {
	for held {
		until := stop
		if p.Last {
			until = ctx.Done()
		}
		if !Sleep(wait, until) {
			return
		}
		wait, held = d.Claim(ctx, p)
	}
}

// Decide is the broker.Report of p's latest claim (broker.Decide: the
// action, the dead-letter reason, a retry's delay until the holder's lease
// ends or on the back-off of p's attempt), except that a retry on the
// broker's last allowed delivery becomes a dead letter with reason
// broker.ReasonMaxDeliver: the broker would drop it, or dead-letter it
// without idem's headers.
func (d *Driver[M]) Decide(p *Pending[M]) broker.Report {
	r := broker.Decide(p.Result, p.Err, d.Guard.Options().Clock(), p.Attempt, d.Backoff)
	if r.Action == idem.ActionRetry && p.Last {
		r.Action, r.Reason, r.Delay = idem.ActionDeadLetter, broker.ReasonMaxDeliver, 0
	}
	return r
}

// RetryDelay is how long the broker should wait before it delivers p
// again: until the holder's lease ends (plus jitter) for a key in progress
// elsewhere, by the guard's clock (idem.RetryAfter); else the back-off of
// p's attempt.
func (d *Driver[M]) RetryDelay(p *Pending[M]) time.Duration {
	return idem.RetryAfter(p.Result, p.Err, d.Guard.Options().Clock(), d.Backoff(p.Attempt))
}

// Sleep waits for d and reports true, or reports false as soon as until is
// closed (at once if it is closed already).
func Sleep(d time.Duration, until <-chan struct{}) bool {
	select {
	case <-until:
		return false
	default:
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-until:
		return false
	}
}
