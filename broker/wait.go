package broker

import (
	"context"
	"time"
)

// sleep waits for d and reports true, or reports false as soon as until is
// closed (at once if it is closed already). A nil until never closes.
func sleep(d time.Duration, until <-chan struct{}) bool {
	if isClosed(until) {
		return false
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

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// mergeDone is a channel that closes when either a or b does (nil when
// both are nil, a itself when b is nil, and the reverse).
func mergeDone(a, b <-chan struct{}) <-chan struct{} {
	switch {
	case a == nil:
		return b
	case b == nil, a == b:
		return a
	}
	select {
	case <-a:
		return a
	case <-b:
		return b
	default:
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		}
		close(done)
	}()
	return done
}

// waitOut waits out a retry's delay for a transport that cannot delay,
// until stop closes or the delivery's context ends, and returns how long it
// waited: the delay the retry really had, which the report then gives
// (none when a shutdown hands it back at once). ctx's Done channel is asked
// for only when there is a delay to wait (some contexts make it on first
// use: Watermill's message context).
func waitOut(delay time.Duration, stop <-chan struct{}, ctx context.Context) time.Duration {
	if isClosed(stop) || delay <= 0 {
		return 0
	}
	start := time.Now()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return delay
	case <-stop:
	case <-ctx.Done():
	}
	return time.Since(start)
}
