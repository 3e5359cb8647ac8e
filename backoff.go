package idem

import (
	"math/rand/v2"
	"time"
)

// ExponentialBackoff returns the delay before retrying a message that Decide
// sent back (ActionRetry): it doubles from min with every attempt (attempt 1
// is the first delivery) up to max, with jitter in [d/2, d] so consumers that
// failed together do not retry together. Broker integrations share it for
// nak delays, requeues and held partitions.
func ExponentialBackoff(min, max time.Duration) func(attempt int) time.Duration {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return func(attempt int) time.Duration {
		d := min
		for i := 1; i < attempt && d < max; i++ {
			d *= 2
		}
		if d > max {
			d = max
		}
		half := d / 2
		return half + rand.N(d-half+1)
	}
}
