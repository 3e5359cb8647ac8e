package consumetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
)

// InProgressSeen returns an observer for a guard that signals each
// in-progress outcome (a claim of a key held elsewhere) on the returned
// channel, dropping signals nobody waits for.
func InProgressSeen() (idem.Observer, <-chan struct{}) {
	seen := make(chan struct{}, 1000)
	return idem.ObserverFunc(func(_ context.Context, e idem.Event) {
		if e.Outcome == idem.OutcomeInProgress {
			select {
			case seen <- struct{}{}:
			default:
			}
		}
	}), seen
}

// AwaitHeld waits for n in-progress claims on seen (InProgressSeen) while
// a consumer holds a message. A report arriving on early first means the
// message was settled instead of held, and fails t.
func AwaitHeld[R any](t testing.TB, seen <-chan struct{}, n int, early <-chan R) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-seen:
		case r := <-early:
			t.Fatalf("the duplicate was not held: it was settled after %d claims: %+v", i+1, r)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d in-progress claims", i)
		}
	}
}

// Orphan claims msg's key in g's store with a lease of lease and leaves it
// claimed, as a consumer does that crashed after its claim (or whose claim
// reply was lost).
func Orphan(t testing.TB, g *idem.Guard, msg idem.Message, lease time.Duration) {
	t.Helper()
	key, err := g.Key(msg)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := g.Fingerprint(msg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c, err := g.Store().Claim(context.Background(), idem.ClaimRequest{Key: key, Fingerprint: fp, Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour), TakeOverStale: true})
	if err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("orphan claim = %+v, %v", c, err)
	}
}

// Blocker makes a handler's first call wait: Started is closed when it
// begins, and it returns once Release is closed. Later calls return at
// once. It counts the calls.
type Blocker struct {
	Started chan struct{}
	Release chan struct{}
	calls   atomic.Int32
}

// NewBlocker returns a Blocker.
func NewBlocker() *Blocker {
	return &Blocker{Started: make(chan struct{}), Release: make(chan struct{})}
}

// Call is the handler's work: the first call blocks until Release.
func (b *Blocker) Call() {
	if b.calls.Add(1) == 1 {
		close(b.Started)
		<-b.Release
	}
}

// Calls is how many times Call ran.
func (b *Blocker) Calls() int { return int(b.calls.Load()) }

// Finish closes Release and fails t unless the blocked call's message was
// processed and acked (report waits for its broker report) and the handler
// ran once.
func (b *Blocker) Finish(t testing.TB, report func() (idem.Action, idem.Result)) {
	t.Helper()
	close(b.Release)
	if a, res := report(); a != idem.ActionAck || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("holder: %v, %+v; want processed and acked", a, res)
	}
	if n := b.Calls(); n != 1 {
		t.Fatalf("%d handler calls, want 1", n)
	}
}
