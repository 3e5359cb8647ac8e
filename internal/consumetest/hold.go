package consumetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
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

// HoldElsewhere claims msg's key through g and keeps it in progress, its
// lease renewed, as another instance running a long handler does, until
// the test ends; then it completes the key.
func HoldElsewhere(t testing.TB, g *idem.Guard, msg idem.Message) {
	t.Helper()
	release, holding, holder := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), msg, func(context.Context) ([]byte, error) {
			close(holding)
			<-release
			return nil, nil
		})
		holder <- err
	}()
	<-holding
	t.Cleanup(func() {
		close(release)
		if err := <-holder; err != nil {
			t.Error(err)
		}
	})
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

// Handler returns a two-phase handler whose every call is b.Call.
func Handler[M any](b *Blocker) broker.Handler[M] {
	return broker.Handle(func(context.Context, M) ([]byte, error) {
		b.Call()
		return []byte("done"), nil
	})
}

// Finish closes Release and fails t unless the blocked call's message was
// processed and acked (its report arrives on report) and the handler ran
// once.
func (b *Blocker) Finish(t testing.TB, report <-chan broker.Report) {
	t.Helper()
	close(b.Release)
	if r := <-report; r.Action != idem.ActionAck || r.Result.Outcome != idem.OutcomeProcessed {
		t.Fatalf("holder: %+v; want processed and acked", r)
	}
	if n := b.Calls(); n != 1 {
		t.Fatalf("%d handler calls, want 1", n)
	}
}

// Hold runs process, a consumer's Process of the first delivery of a key
// whose handler is Handler(b), in the background and returns once the
// handler started: the key is then in progress until Release is closed.
// Its report arrives on the returned channel (see Finish).
func (b *Blocker) Hold(process func() broker.Report) <-chan broker.Report {
	first := Go(process)
	<-b.Started
	return first
}

// Go runs process in the background; its report arrives on the returned
// channel.
func Go(process func() broker.Report) <-chan broker.Report {
	done := make(chan broker.Report, 1)
	go func() { done <- process() }()
	return done
}
