package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgo/idem/internal/lazyctx"
)

// keepAlive keeps one delivery alive: the transport's KeepAlive every
// period, from a timer, unless the guard's heartbeat renewed it since
// (renew, handed to it as the delivery's idem.ContextWithRenewal function);
// a lost lock cancels its delivery's context (ctx, the handler's) with the
// transport's error. A timer rather than a goroutine with a ticker: most
// deliveries are settled long before the first tick, and a goroutine
// started and joined per delivery cost a consumer about 4% of its CPU.
type keepAlive[M any] struct {
	ctx   lazyctx.Ctx // the delivery's context, under its renewal value
	p     *Processor[M]
	msg   M
	every time.Duration
	last  atomic.Int64 // when KeepAlive last succeeded (UnixNano); 0: never

	mu      sync.Mutex // held while a tick runs, so stop waits for it
	stopped bool
	t       *time.Timer
}

// start arms the timer; stop stops it.
func (k *keepAlive[M]) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t = time.AfterFunc(k.every, k.tick)
}

// stop stops the timer, waiting for a tick that is running.
func (k *keepAlive[M]) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.t.Stop()
}

func (k *keepAlive[M]) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	if last := k.last.Load(); last != 0 {
		if since := time.Since(time.Unix(0, last)); since < k.every {
			k.t.Reset(k.every - since) // the heartbeat renewed it
			return
		}
	}
	kctx, cancel := context.WithTimeout(&k.ctx, k.every)
	err := k.renew(kctx)
	cancel()
	if err != nil {
		return
	}
	k.t.Reset(k.every)
}

// renew calls KeepAlive once. A lost lock cancels the delivery and is
// returned; other failures only risk a redelivery, which the record turns
// into a retry or a duplicate: they are reported, and nil returned.
func (k *keepAlive[M]) renew(ctx context.Context) error {
	err := k.p.caps.keepAlive.KeepAlive(ctx, k.msg)
	switch {
	case err == nil:
		k.last.Store(time.Now().UnixNano())
	case errors.Is(err, ErrLockLost):
		k.ctx.Cancel(err)
		return err
	case k.ctx.Err() == nil:
		k.p.reportErr(fmt.Errorf("broker: keep-alive: %w", err))
	}
	return nil
}
