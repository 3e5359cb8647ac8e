package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// DefaultSessionIdleTimeout is how long a session consumer keeps a
// session that brings no message before it releases it
// (Options.SessionIdleTimeout).
const DefaultSessionIdleTimeout = 30 * time.Second

// acceptWait bounds one accept-next: Service Bus answers it with
// CodeTimeout when no session comes, and the loop asks again.
const acceptWait = time.Minute

// SessionConsumer runs a Handler for the messages of a session-enabled
// queue or subscription, one session at a time per worker: it accepts
// the next available session, handles its messages one at a time in
// their order, and releases it once it stays idle. It has the shape of
// every idem consumer (Run, Process) and runs on the same engine: a
// processor per session (broker.Processor.ProcessUntil, per message, as
// Kafka's partitions do).
type SessionConsumer struct {
	client *azservicebus.Client
	topic  string // "" for a queue
	name   string // the queue, or the subscription
	eng    *broker.Engine[*azservicebus.ReceivedMessage]
	opts   Options
}

// NewSessionConsumer returns a consumer of the session-enabled entity
// (a queue, or a subscription as EntityPath(topic, subscription) spells
// it) on client, running h for each message under g. Build g with
// NewGuard, whose scope defaults to the entity path; Options.EntityPath
// defaults to entity.
//
// Options.Sessions sessions are held at once (default
// Options.Concurrency, itself default 1), each renewed while it is held
// (every Options.LockRenewal, by default a third of the session lock),
// and released after Options.SessionIdleTimeout without a message.
// Within a session one message is handled at a time, in order: a retry
// holds the session (the message is tried again in place after its
// back-off, the session lock renewed, never abandoned), and so does a
// key in progress elsewhere (an orphaned claim of a session holder that
// crashed: held until the claim's lease ends, then retaken), so the
// session's order is kept. The scope and the key are the guard's, as for
// NewConsumer.
//
// A nil client or guard, an empty entity, a handler NewConsumer would
// refuse and negative options are refused with an error wrapping
// idem.ErrInvalidOptions.
func NewSessionConsumer(client *azservicebus.Client, entity string, g *idem.Guard, h Handler, opts Options) (*SessionConsumer, error) {
	if client == nil || strings.TrimSpace(entity) == "" {
		return nil, fmt.Errorf("%w: servicebus: nil client or empty entity", idem.ErrInvalidOptions)
	}
	if opts.LockRenewal < 0 || opts.Sessions < 0 || opts.SessionIdleTimeout < 0 {
		return nil, fmt.Errorf("%w: servicebus: negative LockRenewal, Sessions or SessionIdleTimeout", idem.ErrInvalidOptions)
	}
	// The engine checks the handler and the options once, here.
	eo, err := opts.engine()
	if err != nil {
		return nil, err
	}
	eng, err := broker.NewEngine(g, h, eo)
	if err != nil {
		return nil, err
	}
	if opts.EntityPath == "" {
		opts.EntityPath = entity
	}
	if opts.Sessions == 0 {
		opts.Sessions = opts.Concurrency
	}
	if opts.SessionIdleTimeout == 0 {
		opts.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	c := &SessionConsumer{client: client, name: entity, eng: eng, opts: opts}
	if topic, sub, ok := strings.Cut(entity, "/Subscriptions/"); ok {
		c.topic, c.name = topic, sub
	}
	return c, nil
}

// ConsumeSessions is NewSessionConsumer followed by Run.
func ConsumeSessions(ctx context.Context, client *azservicebus.Client, entity string, g *idem.Guard, h Handler, opts Options) error {
	c, err := NewSessionConsumer(client, entity, g, h, opts)
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Run accepts sessions and handles their messages until ctx ends, then
// shuts down gracefully: it stops accepting and receiving, lets the
// in-flight handlers finish (cancelling their contexts after
// ShutdownTimeout) and settles them, releases its sessions (their
// unsettled messages come back to the next holder) and returns nil. It
// returns an error wrapping broker.ErrClosed if the client is closed
// under it.
func (c *SessionConsumer) Run(ctx context.Context) error {
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		runErr error
	)
	for range c.opts.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.acceptLoop(ctx, hard); err != nil {
				mu.Lock()
				if runErr == nil {
					runErr = err
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return runErr
	case <-ctx.Done():
	}
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelHard)
	<-done
	t.Stop()
	return runErr
}

// acceptLoop accepts the next available session and runs it, until ctx
// ends; it returns an error only when the client is closed.
func (c *SessionConsumer) acceptLoop(ctx, hard context.Context) error {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, acceptWait)
		sr, err := c.accept(actx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			c.runSession(ctx, hard, sr)
		case sbCode(err) == azservicebus.CodeTimeout:
			// No session came: ask again.
		case sbCode(err) == azservicebus.CodeClosed:
			return fmt.Errorf("servicebus: accept session: %w: %w", broker.ErrClosed, err)
		default:
			c.eng.ReportError(fmt.Errorf("servicebus: accept session: %w", err))
			sleepUntil(ctx, c.opts.Backoff(1))
		}
	}
	return nil
}

func (c *SessionConsumer) accept(ctx context.Context) (*azservicebus.SessionReceiver, error) {
	if c.topic != "" {
		return c.client.AcceptNextSessionForSubscription(ctx, c.topic, c.name, nil)
	}
	return c.client.AcceptNextSessionForQueue(ctx, c.name, nil)
}

// runSession handles the session's messages in order until it is idle
// for SessionIdleTimeout, its lock is lost, or ctx ends; then it closes
// the receiver, which releases the session.
func (c *SessionConsumer) runSession(ctx, hard context.Context, sr *azservicebus.SessionReceiver) {
	t := c.transport(sr)
	proc := c.eng.Processor(t)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = sr.Close(cctx)
	}()
	idleUntil := time.Now().Add(c.opts.SessionIdleTimeout)
	for ctx.Err() == nil {
		if !t.renewIfDue(ctx) {
			return
		}
		wait := min(t.every(), time.Until(idleUntil))
		if wait <= 0 {
			return // idle: released for another session
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		msgs, err := sr.ReceiveMessages(rctx, 1, nil)
		cancel()
		if len(msgs) == 0 {
			if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				c.eng.ReportError(fmt.Errorf("servicebus: receive from session %q: %w", sr.SessionID(), err))
				return // the session's receiver is broken: accept again
			}
			continue
		}
		for _, m := range msgs {
			if !c.handle(ctx, hard, proc, t, m) {
				return
			}
		}
		idleUntil = time.Now().Add(c.opts.SessionIdleTimeout)
	}
}

// handle runs m until it is settled: a retry is tried again in place
// after its delay, the session held and its lock renewed. It reports
// false when the session is to be given up (its lock lost, a settlement
// failed, or shutdown).
func (c *SessionConsumer) handle(ctx, hard context.Context, proc *broker.Processor[*azservicebus.ReceivedMessage], t *sessionTransport, m *azservicebus.ReceivedMessage) bool {
	t.retries = 0
	for {
		r := proc.ProcessUntil(hard, ctx.Done(), m)
		switch {
		case errors.Is(r.BrokerErr, broker.ErrLockLost):
			return false
		case r.Action == idem.ActionAck:
			return r.BrokerErr == nil
		case r.Action == idem.ActionDeadLetter && r.BrokerErr == nil:
			return true
		}
		if ctx.Err() != nil {
			return false // handed back by closing the session
		}
		t.retries++
		if !t.waitKept(ctx, r.Delay) {
			return false
		}
	}
}

// Process handles one message received on a session receiver sr of the
// consumer's entity, and settles it, with the hooks of Options.Hooks: for
// programs that run their own accept and receive loop. A retry is not
// tried again in place: the report says so (Action retry, Delay), and
// the message stays locked by the session until sr is closed or the
// message is received again. Call it from the session's own goroutine,
// one message at a time, to keep the session's order.
func (c *SessionConsumer) Process(ctx context.Context, sr *azservicebus.SessionReceiver, msg *azservicebus.ReceivedMessage) broker.Report {
	return c.eng.Processor(c.transport(sr)).Process(ctx, msg)
}

// transport is the settler of the session sr holds.
func (c *SessionConsumer) transport(sr *azservicebus.SessionReceiver) *sessionTransport {
	return &sessionTransport{sr: sr, entity: c.opts.EntityPath, maxDeliveries: c.opts.MaxDeliveries,
		lockRenewal: c.opts.LockRenewal, renewed: time.Now(), onError: c.eng.ReportError}
}

// sessionTransport settles one accepted session's messages: complete
// and dead-letter on the session receiver, a retry in place (the session
// loop tries the message again), the session lock as the keep-alive. It
// belongs to the session's goroutine.
type sessionTransport struct {
	sr            *azservicebus.SessionReceiver
	entity        string
	maxDeliveries int
	lockRenewal   time.Duration
	onError       func(error)

	retries int // in-place retries of the message in hand
	mu      sync.Mutex
	renewed time.Time // the session lock's last renewal (or accept)
}

var (
	_ broker.Settler[*azservicebus.ReceivedMessage]    = (*sessionTransport)(nil)
	_ broker.KeepAliver[*azservicebus.ReceivedMessage] = (*sessionTransport)(nil)
)

func (t *sessionTransport) Message(msg *azservicebus.ReceivedMessage) idem.Message {
	return MessageOf(msg)
}

// Delivery counts the in-place retries beside Service Bus's
// DeliveryCount, so that MaxDeliveries bounds them in the transactional
// inbox too; the last delivery is the one at the entity's
// MaxDeliveryCount, which Service Bus would dead-letter if the session
// were given up.
func (t *sessionTransport) Delivery(msg *azservicebus.ReceivedMessage) broker.Delivery {
	n := max(int(msg.DeliveryCount), 1)
	return broker.Delivery{Attempt: n + t.retries, Last: t.maxDeliveries > 0 && n >= t.maxDeliveries}
}

func (t *sessionTransport) Ack(ctx context.Context, msg *azservicebus.ReceivedMessage) error {
	return t.sr.CompleteMessage(ctx, msg, nil)
}

// Retry does nothing: the message is tried again in place, its session
// held, so that no later message of the session overtakes it.
func (t *sessionTransport) Retry(context.Context, *azservicebus.ReceivedMessage, time.Duration) error {
	return nil
}

func (t *sessionTransport) DeadLetter(ctx context.Context, msg *azservicebus.ReceivedMessage, dl broker.DeadLetter) error {
	return t.sr.DeadLetterMessage(ctx, msg, deadLetterOptions(t.entity, msg, dl))
}

// KeepAlive renews the session's lock, which holds its messages' locks.
// A session Service Bus reports lost (lock lost, or locked by another
// receiver when the client tried to take it again) wraps
// broker.ErrLockLost.
func (t *sessionTransport) KeepAlive(ctx context.Context, _ *azservicebus.ReceivedMessage) error {
	err := t.sr.RenewSessionLock(ctx, nil)
	if err == nil {
		t.mu.Lock()
		t.renewed = time.Now()
		t.mu.Unlock()
		return nil
	}
	if sbCode(err) == azservicebus.CodeLockLost || strings.Contains(err.Error(), "session-cannot-be-locked") || strings.Contains(err.Error(), "session-lock-lost") {
		return fmt.Errorf("servicebus: renew session lock: %w: %w", broker.ErrLockLost, err)
	}
	return fmt.Errorf("servicebus: renew session lock: %w", err)
}

// KeepAliveEvery is Options.LockRenewal, by default a third of the
// session lock's remaining time.
func (t *sessionTransport) KeepAliveEvery(*azservicebus.ReceivedMessage) time.Duration {
	return t.every()
}

func (t *sessionTransport) every() time.Duration {
	until := t.sr.LockedUntil()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lockRenewal > 0 || until.IsZero() {
		return renewEvery(t.lockRenewal, nil)
	}
	// A third of the lock as it was at the last renewal.
	return max(until.Sub(t.renewed)/3, 100*time.Millisecond)
}

// renewIfDue renews the session lock when a period has passed since the
// last renewal (between messages: while one is in the engine, its
// keep-alive renews); false when the session is lost.
func (t *sessionTransport) renewIfDue(ctx context.Context) bool {
	t.mu.Lock()
	last := t.renewed
	t.mu.Unlock()
	every := t.every()
	if time.Since(last) < every {
		return true
	}
	kctx, cancel := context.WithTimeout(ctx, every)
	defer cancel()
	err := t.KeepAlive(kctx, nil)
	switch {
	case errors.Is(err, broker.ErrLockLost):
		return false
	case err != nil && ctx.Err() == nil:
		t.onError(fmt.Errorf("broker: keep-alive: %w", err))
	}
	return true
}

// waitKept waits d, the session lock renewed meanwhile; false when ctx
// ended or the session was lost first.
func (t *sessionTransport) waitKept(ctx context.Context, d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		if !t.renewIfDue(ctx) {
			return false
		}
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if !sleepUntil(ctx, min(left, t.every())) {
			return false
		}
	}
}

// sleepUntil waits d and reports true, or false once ctx ends.
func sleepUntil(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
