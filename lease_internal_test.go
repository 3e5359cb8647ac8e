package idem

import (
	"context"
	"errors"
	"testing"
	"time"
)

// stillHeartbeat is a heartbeat whose timer never fires: the test calls
// fire itself, and no renewal starts behind its back.
func stillHeartbeat(lease time.Duration) *heartbeat {
	hb := newHeartbeat(lease)
	hb.armed, hb.at = true, -1<<63 // nothing is due before it: never armed again
	return hb
}

// Renewals are due a third of the lease after the request that set the
// lease was sent, however late its answer came (issue 37: counted from
// the answer, a store answering late pushed each renewal past the lease);
// a failed renewal leaves the lease's end where it was, and the run is due
// no later than its end less the margin.
func TestRenewalsDueFromLeaseEnd(t *testing.T) {
	const lease = 3 * time.Hour // a renewal every hour; the margin 18 minutes
	errDown := errors.New("connection reset")
	for _, late := range []time.Duration{0, 30 * time.Minute, 70 * time.Minute} {
		t.Run("answered "+late.String()+" after sending", func(t *testing.T) {
			hb := stillHeartbeat(lease)
			r := &run{}
			r.ctx.parent = context.Background()
			now := time.Now()

			claimSent := now.Add(-late)
			hb.add(r, claimSent)
			if want := hb.since(claimSent) + time.Hour; r.due != want || r.state != runQueued {
				t.Fatalf("after the claim: due %v (%v), want %v: a third of the lease after its sending", r.due, r.state, want)
			}
			if want := hb.since(claimSent) + lease; r.end != want {
				t.Fatalf("after the claim: lease ends at %v, want %v", r.end, want)
			}

			// fire starts a renewal; it answers late too.
			hb.mu.Lock()
			hb.unlink(r)
			r.state = runRenewing
			hb.insert(r, r.end-hb.margin)
			hb.mu.Unlock()
			renewSent := claimSent.Add(10 * time.Minute)
			if !hb.renewed(r, renewSent, nil) {
				t.Fatal("a running handler's renewal reported ended")
			}
			hb.next(r, renewSent)
			if want := hb.since(renewSent) + time.Hour; r.due != want || r.state != runQueued {
				t.Fatalf("after a renewal: due %v (%v), want %v: a third of the lease after its sending", r.due, r.state, want)
			}
			if want := hb.since(renewSent) + lease; r.end != want {
				t.Fatalf("after a renewal: lease ends at %v, want %v", r.end, want)
			}

			// Failed renewals keep the lease's end; the last before it is
			// due at the end less the margin, not a period later.
			end := r.end
			for i, sent := range []time.Time{renewSent.Add(time.Hour), renewSent.Add(2 * time.Hour)} {
				hb.mu.Lock()
				hb.unlink(r)
				r.state = runRenewing
				hb.insert(r, r.end-hb.margin)
				hb.mu.Unlock()
				hb.renewed(r, sent, errDown)
				hb.next(r, sent)
				want := min(hb.since(sent)+time.Hour, end-hb.margin)
				if r.end != end || r.due != want {
					t.Fatalf("after failed renewal %d: lease ends %v, due %v; want %v, %v", i+1, r.end, r.due, end, want)
				}
			}
			hb.remove(r)
			if hb.head != nil || hb.tail != nil {
				t.Fatal("the run stayed on the heartbeat after its handler returned")
			}
		})
	}
}

// A run whose lease comes within the margin of its end with no renewal
// answered has its handler's context cancelled with a cause that is
// ErrLeaseLost, and leaves the heartbeat; one whose renewal answered in
// the meantime waits for its new end.
func TestLeaseRunsOutBeforeItsEnd(t *testing.T) {
	const lease = 3 * time.Hour
	for _, tc := range []struct {
		name    string
		state   runState      // renewing: a renewal in flight; queued: its renewals failed
		sentAgo time.Duration // the request that set the lease was sent this long ago
		movedOn bool          // a renewal answered since: its lease ends later
		stopped bool
	}{
		{name: "renewal in flight, end near", state: runRenewing, sentAgo: lease - time.Minute, stopped: true},
		{name: "renewals failed, end near", state: runQueued, sentAgo: lease - time.Minute, stopped: true},
		{name: "renewal in flight, end past", state: runRenewing, sentAgo: 2 * lease, stopped: true},
		{name: "renewal answered since", state: runRenewing, sentAgo: lease - time.Minute, movedOn: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := stillHeartbeat(lease)
			r := &run{}
			r.ctx.parent = context.Background()
			sent := time.Now().Add(-tc.sentAgo)
			hb.mu.Lock()
			r.end = hb.since(sent) + lease
			r.state = tc.state
			hb.insert(r, r.end-hb.margin)
			hb.mu.Unlock()
			if tc.movedOn {
				hb.renewed(r, time.Now(), nil)
			}
			hb.fire()
			cause := context.Cause(&r.ctx)
			if !tc.stopped {
				if cause != nil || r.state != runRenewing || r.due != r.end-hb.margin {
					t.Fatalf("cause %v, %v due %v; want waiting for its new end less the margin, %v", cause, r.state, r.due, r.end-hb.margin)
				}
				hb.remove(r)
				return
			}
			if !errors.Is(cause, ErrLeaseLost) || r.ctx.Err() == nil {
				t.Fatalf("handler's context: %v, cause %v; want cancelled with ErrLeaseLost", r.ctx.Err(), cause)
			}
			if r.state != runEnded || hb.head != nil {
				t.Fatalf("the run is %v and the heartbeat's head %p; want it off the heartbeat", r.state, hb.head)
			}
		})
	}
}
