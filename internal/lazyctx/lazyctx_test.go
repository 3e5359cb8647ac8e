package lazyctx

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

var errLost = errors.New("lock lost")

// TestDetached: a detached context with a deadline answers as
// context.WithDeadline(context.WithoutCancel(parent), deadline) would,
// whether or not anything asked for Done before it ended: the parent's
// values, not its cancellation nor its deadline; Canceled once cancelled,
// DeadlineExceeded past its deadline, with Err, Done and Cause agreeing.
func TestDetached(t *testing.T) {
	for _, doneFirst := range []bool{false, true} {
		parent, cancelParent := context.WithTimeout(context.WithValue(context.Background(), ctxKey{}, "v"), time.Millisecond)
		cancelParent()

		deadline := time.Now().Add(time.Hour)
		c := new(Ctx)
		c.Init(parent, deadline, true)
		if doneFirst {
			c.Done()
		}
		if err, cause := c.Err(), context.Cause(c); err != nil || cause != nil {
			t.Fatalf("done first %v: Err %v, Cause %v with the parent cancelled, want nil", doneFirst, err, cause)
		}
		if v := c.Value(ctxKey{}); v != "v" {
			t.Fatalf("done first %v: Value %v, want the parent's", doneFirst, v)
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
			t.Fatalf("done first %v: Deadline %v %v, want its own", doneFirst, d, ok)
		}
		ran := make(chan struct{})
		context.AfterFunc(c, func() { close(ran) })
		select {
		case <-c.Done():
			t.Fatalf("done first %v: Done closed before the end", doneFirst)
		default:
		}
		c.Cancel(nil)
		<-c.Done()
		<-ran
		if err, cause := c.Err(), context.Cause(c); !errors.Is(err, context.Canceled) || !errors.Is(cause, context.Canceled) {
			t.Fatalf("done first %v: cancelled: Err %v, Cause %v, want Canceled", doneFirst, err, cause)
		}

		past := new(Ctx)
		past.Init(context.Background(), time.Now().Add(-time.Second), true)
		if doneFirst {
			past.Done()
		}
		if err := past.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("done first %v: past its deadline: Err %v, want DeadlineExceeded", doneFirst, err)
		}
		<-past.Done()
		if cause := context.Cause(past); !errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("done first %v: past its deadline: Cause %v, want DeadlineExceeded", doneFirst, cause)
		}
		past.Cancel(nil)
		if err := past.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("done first %v: cancelled past its deadline: Err %v, want DeadlineExceeded (the first end stands)", doneFirst, err)
		}
	}
}

// TestCancelCause: a context neither detached nor with a deadline answers
// as context.WithCancelCause(parent) would, whether or not anything asked
// for Done first: the parent's deadline and values, cancelled with its
// parent (the parent's cause), with the cause it is cancelled with, and
// the first end stands.
func TestCancelCause(t *testing.T) {
	errParent := errors.New("parent's cause")
	for _, doneFirst := range []bool{false, true} {
		deadline := time.Now().Add(time.Hour)
		parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
		parent, cancelDeadline := context.WithDeadline(parent, deadline)
		defer cancelDeadline()
		c := new(Ctx)
		c.Init(parent, time.Time{}, false)
		if doneFirst {
			c.Done()
		}
		if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
			t.Fatalf("done first %v: Deadline %v %v, want the parent's", doneFirst, d, ok)
		}
		if err, v := c.Err(), c.Value(ctxKey{}); err != nil || v != "v" {
			t.Fatalf("done first %v: Err %v, Value %v; want nil and the parent's", doneFirst, err, v)
		}
		cancelParent(errParent)
		<-c.Done()
		if err, cause := c.Err(), context.Cause(c); !errors.Is(err, context.Canceled) || !errors.Is(cause, errParent) {
			t.Fatalf("done first %v: parent cancelled: Err %v, Cause %v; want Canceled and the parent's cause", doneFirst, err, cause)
		}

		for _, tc := range []struct {
			causes []error // Cancel's, in turn
			want   error
		}{
			{[]error{nil}, context.Canceled},
			{[]error{errLost, nil}, errLost},
			{[]error{nil, errLost}, context.Canceled},
		} {
			// A live parent with a cause of its own (none yet): the
			// context's Cause is its own, not its parent's.
			live, stopLive := context.WithCancelCause(context.Background())
			c := new(Ctx)
			c.Init(live, time.Time{}, false)
			if doneFirst {
				c.Done()
			}
			for _, cause := range tc.causes {
				c.Cancel(cause)
			}
			for _, when := range []string{"before Done", "after Done"} {
				if err, cause := c.Err(), context.Cause(c); !errors.Is(err, context.Canceled) || !errors.Is(cause, tc.want) {
					t.Fatalf("done first %v, cancelled with %v, %s: Err %v, Cause %v; want Canceled and %v", doneFirst, tc.causes, when, err, cause, tc.want)
				}
				<-c.Done()
			}
			stopLive(nil)
		}
	}
}

// A context made with InitTimeout ends its timeout after it is first asked
// about, and reports that deadline from then on.
func TestInitTimeoutCountsFromTheFirstQuestion(t *testing.T) {
	var c Ctx
	c.InitTimeout(context.Background(), 50*time.Millisecond, true)
	time.Sleep(80 * time.Millisecond) // longer than the timeout, before any question
	before := time.Now()
	if err := c.Err(); err != nil {
		t.Fatalf("first Err: %v, want nil (the timeout counts from now)", err)
	}
	d, ok := c.Deadline()
	if !ok || d.Before(before.Add(50*time.Millisecond)) || d.After(time.Now().Add(50*time.Millisecond)) {
		t.Fatalf("deadline %v (%v), want 50ms after the first Err at %v", d, ok, before)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done 5s after its deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || time.Now().Before(d) {
		t.Fatalf("after Done: %v at %v, want DeadlineExceeded at %v or later", c.Err(), time.Now(), d)
	}
	c.Cancel(nil)

	// Done as the first question: the deadline counts from it.
	var w Ctx
	w.InitTimeout(context.Background(), 30*time.Millisecond, false)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	<-w.Done()
	if took := time.Since(start); took < 25*time.Millisecond {
		t.Fatalf("done %v after the first Done, want about 30ms", took)
	}
	w.Cancel(nil)
}
