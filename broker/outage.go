package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemgo/idem"
)

// OutageError is what Hooks.OnError receives while the store cannot be
// reached: the latest store error and how many claims met it since the
// previous report. It is reported at most once per OutageReportEvery, so a
// store error loop is never silent and never floods the hook; the guard's
// observer receives the same report as an idem.Outage
// (idem.OutageObserver).
type OutageError struct {
	Err   error
	Held  int    // claims that met the outage since the last report
	Scope string // the guard's scope (the consumer's identity): which consumer's store is out
}

// OutageReportEvery is how often, at most, an OutageError is reported.
const OutageReportEvery = 10 * time.Second

func (e *OutageError) Error() string {
	return fmt.Sprintf("broker: store unreachable for scope %q, deliveries held without spending a broker delivery (%d claims since the last report): %v", e.Scope, e.Held, e.Err)
}

func (e *OutageError) Unwrap() error { return e.Err }

// isOutage reports whether a guard call failed because the store could not
// be reached (down, timed out): not the message's fault, so it spends no
// delivery and counts as no failure.
func isOutage(res idem.Result, err error) bool {
	return err != nil && res.Outcome == idem.OutcomeStoreError && !idem.IsPermanent(err)
}

// outageReporter rate-limits the OutageErrors of one Engine: its
// processors (a partition's, a session's) share it.
type outageReporter struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

func (o *outageReporter) report(obs *observers, err error) {
	o.mu.Lock()
	o.n++
	if !o.last.IsZero() && time.Since(o.last) < OutageReportEvery {
		o.mu.Unlock()
		return
	}
	n := o.n
	o.n, o.last = 0, time.Now()
	o.mu.Unlock()
	if obs.outage != nil {
		obs.outage.ObserveOutage(context.Background(), idem.Outage{Scope: obs.scope, Held: n, Err: err})
	}
	if obs.onError != nil {
		obs.onError(&OutageError{Err: err, Held: n, Scope: obs.scope})
	}
}
