package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrTimeout means the run hit its Deadline (the command's --timeout).
var ErrTimeout = errors.New("demo timed out")

// timeoutErr reports that the deadline d ran out while doing what err says.
func timeoutErr(d time.Duration, err error) error {
	return fmt.Errorf("%w: --timeout %v ran out: %v (give it a longer --timeout, or fewer --messages)", ErrTimeout, d, err)
}

// timedOut turns an error a run met because its own deadline ran out into
// ErrTimeout, whatever step it came from (a migrate, a publish, the check):
// the reader must learn it was the timeout, not a broken store. An
// interrupt (the parent context ending) stays what it is.
func timedOut(parent, ctx context.Context, d time.Duration, err error) error {
	if err == nil || errors.Is(err, ErrTimeout) || parent.Err() != nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return timeoutErr(d, err)
}

// cleanupTimeout bounds the removal of what a run wrote.
const cleanupTimeout = 30 * time.Second

// cleanup removes what a run wrote to the servers it was given. It runs
// after the run with a context of its own, so a run that failed, timed out
// or was interrupted still cleans up.
type cleanup struct {
	steps   []func(ctx context.Context) error
	removed int64 // records removed
}

func (c *cleanup) add(step func(ctx context.Context) error) { c.steps = append(c.steps, step) }

// finish runs the steps, last added first, and reports on them: in rep
// when the run returns one, added to err otherwise.
func (c *cleanup) finish(rep *Report, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var left []string
	for i := len(c.steps) - 1; i >= 0; i-- {
		if e := c.steps[i](ctx); e != nil {
			left = append(left, e.Error())
		}
	}
	if rep != nil {
		rep.RecordsRemoved = c.removed
		rep.LeftBehind = left
		return err
	}
	if err != nil && len(left) > 0 {
		return fmt.Errorf("%w; the cleanup failed too: could not %s", err, strings.Join(left, "; could not "))
	}
	return err
}
