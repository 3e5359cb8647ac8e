package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/outbox"
)

// eventLog collects the relay's lease events.
type eventLog struct {
	mu    sync.Mutex
	kinds []outbox.EventKind
	got   chan outbox.EventKind
}

func newEventLog() *eventLog { return &eventLog{got: make(chan outbox.EventKind, 64)} }

func (l *eventLog) Observe(context.Context, idem.Event) {}

func (l *eventLog) ObserveRelay(_ context.Context, e outbox.Event) {
	switch e.Kind {
	case outbox.EventLeaseAcquired, outbox.EventLeaseLost, outbox.EventLeaseReleased:
		l.mu.Lock()
		l.kinds = append(l.kinds, e.Kind)
		l.mu.Unlock()
		l.got <- e.Kind
	}
}

func (l *eventLog) wait(t *testing.T, want outbox.EventKind) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case k := <-l.got:
			if k == want {
				return
			}
		case <-timeout.C:
			t.Fatalf("no %v event; saw %v", want, l.all())
		}
	}
}

func (l *eventLog) all() []outbox.EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outbox.EventKind(nil), l.kinds...)
}

// A graceful stop releases the lease and reports lease_released, never
// lease_lost: dashboards alert on lease_lost as a takeover or a failed
// renewal.
func TestRelayGracefulStopReportsRelease(t *testing.T) {
	s := newStore(t)
	log := newEventLog()
	_, stop := start(t, s, &broker{}, outbox.RelayOptions{Owner: "a", Observer: log})
	log.wait(t, outbox.EventLeaseAcquired)
	stop()
	got := log.all()
	want := []outbox.EventKind{outbox.EventLeaseAcquired, outbox.EventLeaseReleased}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("lease events %v, want %v", got, want)
	}
	if st := stats(t, s); st.Lease.Until.After(time.Now()) {
		t.Fatalf("lease after the stop: %+v, want released", st.Lease)
	}
}

// A takeover is lease_lost, and the relay that lost the lease has nothing
// to release when it stops.
func TestRelayTakeoverReportsLost(t *testing.T) {
	s := newStore(t)
	log := newEventLog()
	_, stop := start(t, s, &broker{}, outbox.RelayOptions{Owner: "a", Observer: log})
	log.wait(t, outbox.EventLeaseAcquired)
	// Another instance whose clock is an hour ahead finds the lease ended
	// and takes it for an hour: a's next renewal finds it gone.
	later := time.Now().Add(time.Hour)
	l, err := s.Lease(context.Background(), outbox.LeaseRequest{Owner: "b", Now: later, Until: later.Add(time.Hour)})
	if err != nil || l.Owner != "b" {
		t.Fatalf("takeover: %+v, %v", l, err)
	}
	log.wait(t, outbox.EventLeaseLost)
	stop()
	for _, k := range log.all() {
		if k == outbox.EventLeaseReleased {
			t.Fatalf("lease events %v: a released a lease it had lost", log.all())
		}
	}
}

func TestEventLeaseReleasedName(t *testing.T) {
	if got := outbox.EventLeaseReleased.String(); got != "lease_released" {
		t.Fatalf("EventLeaseReleased.String() = %q", got)
	}
}
