package idem

import (
	"context"
	"fmt"
	"time"
)

// Sweeper deletes expired records in small batches so the store stays the
// size of the retention window. Run it in one goroutine per process; stores
// shared by several processes let one sweep at a time.
type Sweeper struct {
	Store     Store
	BatchSize int              // records per batch; default 1000
	Interval  time.Duration    // pause between sweeps once caught up; default 1m
	Pause     time.Duration    // pause between batches of one sweep; default 0
	Clock     func() time.Time // default time.Now
	// Observer, if it implements SweepObserver, is told of each sweep Run
	// makes: give it the guards' observer.
	Observer Observer
	// OnSweep, if set, is called after each sweep with the rows it deleted.
	//
	// Deprecated: set Observer (a SweepObserver: idemotel, idemprom's
	// Exporter.Observer(), NewSlogObserver); OnSweep is still called.
	OnSweep func(deleted int, err error)
}

// SweepOnce deletes expired records batch by batch until a batch comes back
// short, and returns how many it deleted.
func (s *Sweeper) SweepOnce(ctx context.Context) (int, error) {
	if s.Store == nil {
		return 0, fmt.Errorf("%w: Sweeper without a Store", ErrInvalidOptions)
	}
	batch := s.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	clock := s.Clock
	if clock == nil {
		clock = time.Now
	}
	total := 0
	for {
		n, err := s.Store.Sweep(ctx, SweepRequest{Now: clock(), Limit: batch})
		total += n
		if err != nil {
			return total, storeErr("sweep", err)
		}
		if n < batch {
			return total, nil
		}
		if s.Pause > 0 {
			if err := sleep(ctx, s.Pause); err != nil {
				return total, err
			}
		} else if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// Run sweeps every Interval until ctx ends, and then returns nil. Each
// sweep is reported to the Observer (SweepObserver); errors are retried at
// the next interval.
func (s *Sweeper) Run(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	so, _ := s.Observer.(SweepObserver)
	for {
		start := time.Now()
		n, err := s.SweepOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if so != nil {
			so.ObserveSweep(ctx, Sweep{Deleted: n, Err: err, Duration: time.Since(start)})
		}
		if s.OnSweep != nil {
			s.OnSweep(n, err)
		}
		if sleep(ctx, interval) != nil {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
