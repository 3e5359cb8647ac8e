package consumetest

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
)

// Hooks are hooks on an adapter's messages that call hooks (brokertest's,
// on idem.Message) with each message as of maps it (the adapter's
// MessageOf).
func Hooks[M any](hooks broker.Hooks[idem.Message], of func(M) idem.Message) broker.Hooks[M] {
	wrap := func(f func(context.Context, idem.Message, broker.Report)) func(context.Context, M, broker.Report) {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, msg M, r broker.Report) { f(ctx, of(msg), r) }
	}
	return broker.Hooks[M]{
		BeforeSettle: wrap(hooks.BeforeSettle),
		AfterSettle:  wrap(hooks.AfterSettle),
		OnDeadLetter: wrap(hooks.OnDeadLetter),
		OnError:      hooks.OnError,
	}
}

// Running is a consumer's Run on a connection of its own, as
// brokertest.Running: Stop ends Run and then closes the connection
// gracefully, Kill closes it at once (a crash) and lets Run wind down in
// the background. down counts the Runs not yet wound down, so that a test's
// cleanup waits for them before it deletes their destination.
type Running struct {
	down   *sync.WaitGroup
	cancel context.CancelFunc
	done   chan error // Run's result
	close  func() error
	kill   func()
	once   sync.Once
	err    error
}

// Start runs run in the background. close ends the connection after a
// graceful stop (flushing what Run settled); kill ends it at once.
func Start(down *sync.WaitGroup, run func(context.Context) error, close func() error, kill func()) *Running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{down: down, cancel: cancel, done: make(chan error, 1), close: close, kill: kill}
	down.Add(1)
	go func() { r.done <- run(ctx) }()
	return r
}

// Stop ends Run, which settles what is in flight and hands back what it did
// not start, then closes the connection; it returns Run's error, else the
// close's.
func (r *Running) Stop() error {
	r.once.Do(func() {
		defer r.down.Done()
		r.cancel()
		r.err = <-r.done
		if err := r.close(); r.err == nil {
			r.err = err
		}
	})
	return r.err
}

// Kill is a crash: the connection closes at once, so nothing more reaches
// the broker, and Run winds down in the background.
func (r *Running) Kill() {
	r.once.Do(func() {
		r.kill()
		r.cancel()
		go func() {
			defer r.down.Done()
			<-r.done
		}()
	})
}

// SuiteHandler is the adapter's handler for brokertest's Consumer: its
// Handle, or its HandleTx when set, called with each message as of maps it.
func SuiteHandler[M any](c brokertest.Consumer, of func(M) idem.Message) broker.Handler[M] {
	if c.HandleTx != nil {
		return broker.HandleTx(func(ctx context.Context, tx *sql.Tx, msg M) ([]byte, error) { return c.HandleTx(ctx, tx, of(msg)) })
	}
	return broker.Handle(func(ctx context.Context, msg M) ([]byte, error) { return c.Handle(ctx, of(msg)) })
}

// Backoff is the adapter's back-off for brokertest's Consumer: its
// RetryBackoff every time, or nil (the adapter's default) when unset.
func Backoff(c brokertest.Consumer) func(int) time.Duration {
	if d := c.RetryBackoff; d > 0 {
		return func(int) time.Duration { return d }
	}
	return nil
}
