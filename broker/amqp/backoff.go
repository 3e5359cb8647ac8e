package amqpidem

import (
	"math/rand/v2"
	"time"
)

// Default back-off bounds for requeued deliveries.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// ExponentialBackoff returns a back-off that doubles from min with every
// delivery of the message (attempt 1 is the first delivery; see Options.Backoff for what a queue reports) up to max, with
// jitter in [d/2, d] so consumers that failed together do not retry together.
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
