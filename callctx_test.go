package idem

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// callCtx behaves as the standard context it stands for, whether or not
// anything asked for Done before it ended.
func TestCallCtx(t *testing.T) {
	errCause := errors.New("the caller's cause")
	type ctxKey struct{}
	g := &Guard{opts: Options{StoreTimeout: time.Hour}}
	for _, waited := range []bool{false, true} {
		// waited: Done was asked for before the context ended.
		name := map[bool]string{false: "unwaited", true: "waited"}[waited]
		wait := func(c *callCtx) {
			if waited {
				c.Done()
			}
		}
		t.Run(name+"/past deadline", func(t *testing.T) {
			c := g.storeCtxAt(context.Background(), time.Now().Add(-2*time.Hour))
			wait(c)
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Err = %v", err)
			}
			if !closed(c.Done()) || context.Cause(c) != context.DeadlineExceeded {
				t.Fatalf("Done closed %v, Cause %v", closed(c.Done()), context.Cause(c))
			}
			if d, ok := c.Deadline(); !ok || !d.Before(time.Now()) {
				t.Fatalf("Deadline = %v, %v", d, ok)
			}
		})
		t.Run(name+"/deadline", func(t *testing.T) {
			c := g.storeCtxAt(context.Background(), time.Now().Add(-time.Hour+20*time.Millisecond))
			wait(c)
			<-c.Done() // closes at the deadline
			if !errors.Is(c.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err = %v", c.Err())
			}
		})
		t.Run(name+"/parent cancelled", func(t *testing.T) {
			parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
			c := g.storeCtx(parent)
			wait(c)
			if c.Err() != nil || closed(c.Done()) || c.Value(ctxKey{}) != "v" {
				t.Fatalf("before: Err %v, Value %v", c.Err(), c.Value(ctxKey{}))
			}
			cancel(errCause)
			<-c.Done()
			if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != errCause {
				t.Fatalf("Err %v, Cause %v", c.Err(), context.Cause(c))
			}
		})
		t.Run(name+"/cancelled", func(t *testing.T) {
			c := g.storeCtx(context.Background())
			wait(c)
			child, stop := context.WithCancel(c)
			defer stop()
			fired := make(chan struct{})
			context.AfterFunc(c, func() { close(fired) })
			c.cancel(nil)
			<-fired
			<-child.Done()
			if !errors.Is(c.Err(), context.Canceled) || !closed(c.Done()) || !errors.Is(child.Err(), context.Canceled) {
				t.Fatalf("Err %v, child %v", c.Err(), child.Err())
			}
		})
		t.Run(name+"/detached", func(t *testing.T) {
			parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
			c := g.settleCtx(parent, time.Now())
			wait(c)
			cancel(errCause)
			if c.Err() != nil || closed(c.Done()) || c.Value(ctxKey{}) != "v" {
				t.Fatalf("a settling call ended with its caller: Err %v", c.Err())
			}
			if _, ok := c.Deadline(); !ok {
				t.Fatal("a settling call has no deadline")
			}
			c.cancel(nil)
			if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != context.Canceled {
				t.Fatalf("after its end: Err %v, Cause %v (not the caller's)", c.Err(), context.Cause(c))
			}
		})
		t.Run(name+"/lease lost", func(t *testing.T) {
			k := Key{Scope: "s", ID: "m"}
			c := &callCtx{parent: context.Background(), key: &k}
			wait(c)
			if got, ok := KeyFromContext(c); !ok || got != k {
				t.Fatalf("KeyFromContext = %v, %v", got, ok)
			}
			if _, ok := c.Deadline(); ok {
				t.Fatal("a handler's context has a deadline of its own")
			}
			c.cancel(ErrLeaseLost)
			c.cancel(nil) // the handler's end: the cause stays
			<-c.Done()
			if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != ErrLeaseLost {
				t.Fatalf("Err %v, Cause %v", c.Err(), context.Cause(c))
			}
		})
	}
}

// Done, Err, Value and cancel may race (a store's goroutines, the
// heartbeat, the handler): go test -race checks them, and a cancel that
// comes while Done makes the inner context still closes its channel. A
// settling context (detached) too: Value wraps its parent while Err reads
// without a lock.
func TestCallCtxConcurrent(t *testing.T) {
	g := &Guard{opts: Options{StoreTimeout: time.Hour}}
	for i := range 100 {
		c := new(callCtx)
		g.bound(c, context.Background(), time.Now(), i%2 == 1)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i {
				case 0:
					<-c.Done()
				case 1:
					for c.Err() == nil {
					}
				case 2:
					c.Value(keyCtx{})
					c.cancel(nil)
				case 3:
					context.Cause(c)
				}
			}()
		}
		wg.Wait()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("Err %v", c.Err())
		}
	}
}
