package sqsidem

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// fifoRun is one Run of a Consumer on a FIFO queue. SQS gives a message
// group's messages in order, none while one of the group is in flight,
// but several of one group in one receive: each group in hand is handled
// by a goroutine of its own, one message at a time, in order, on the
// engine (broker.Processor.ProcessUntil), at most Concurrency groups at
// once. A retry is tried again in place after its back-off, the message
// kept in flight, so that no later message of its group overtakes it.
type fifoRun struct {
	c    *Consumer
	ctx  context.Context // Run's: its end stops receiving and the holds
	stop <-chan struct{} // ctx.Done()
	hard context.Context // the handlers': ends ShutdownTimeout after ctx

	mu     sync.Mutex
	groups map[string]*fifoGroup
	freed  chan struct{} // signalled when a group ends
	wg     sync.WaitGroup
}

// fifoGroup is one message group in hand.
type fifoGroup struct {
	id      string
	queue   []*types.Message // received, not started, in order
	waiting *types.Message   // the message waiting out its retry's delay
}

// groupTransport settles one group's messages on its goroutine: a retry is in
// place (the group loop waits its delay and processes the message again),
// and the in-place retries count in the delivery's Attempt so that
// MaxDeliveries bounds them in the transactional inbox too.
type groupTransport struct {
	*transport
	retries int
}

// Retry does nothing: the group loop tries the message again in place.
func (t *groupTransport) Retry(context.Context, *types.Message, time.Duration) error { return nil }

func (t *groupTransport) Delivery(m *types.Message) broker.Delivery {
	d := t.transport.Delivery(m)
	d.Attempt += t.retries
	return d
}

func (c *Consumer) runFIFO(ctx context.Context) error {
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	r := &fifoRun{c: c, ctx: ctx, stop: ctx.Done(), hard: hard, groups: map[string]*fifoGroup{}, freed: make(chan struct{}, 1)}
	keeper := make(chan struct{})
	go func() { defer close(keeper); r.keepAlive() }()
	for ctx.Err() == nil {
		r.mu.Lock()
		full := len(r.groups) >= c.opts.Concurrency
		r.mu.Unlock()
		if full {
			select {
			case <-r.freed:
			case <-ctx.Done():
			}
			continue
		}
		msgs, err := c.t.Receive(ctx, 10)
		if err != nil {
			if ctx.Err() == nil {
				c.eng.ReportError(err)
				select {
				case <-time.After(c.opts.Backoff(1)):
				case <-ctx.Done():
				}
			}
			continue
		}
		r.add(msgs)
	}
	t := time.AfterFunc(c.opts.ShutdownTimeout, cancelHard)
	r.wg.Wait()
	t.Stop()
	cancelHard()
	<-keeper
	return nil
}

// add queues msgs on their groups, starting a goroutine for each group
// not in hand.
func (r *fifoRun) add(msgs []*types.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		id := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		g := r.groups[id]
		if g == nil {
			g = &fifoGroup{id: id}
			r.groups[id] = g
			r.wg.Add(1)
			go r.run(g)
		}
		g.queue = append(g.queue, m)
	}
}

// next takes g's next message; when none is left, g is done.
func (r *fifoRun) next(g *fifoGroup) (*types.Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(g.queue) == 0 {
		delete(r.groups, g.id)
		select {
		case r.freed <- struct{}{}:
		default:
		}
		return nil, false
	}
	m := g.queue[0]
	g.queue = g.queue[1:]
	return m, true
}

// run handles g's messages in order until none is left. Once Run's
// context ends, the messages not started are made visible again, unless
// one of them is on its last delivery (SQS would move it to the
// dead-letter queue without idem's headers): then the group is handled
// on, until ShutdownTimeout.
func (r *fifoRun) run(g *fifoGroup) {
	defer r.wg.Done()
	t := &groupTransport{transport: r.c.t}
	proc := r.c.eng.Processor(t)
	for {
		if r.ctx.Err() != nil && !r.holdsLast(g) {
			r.giveBack(g)
			return
		}
		m, ok := r.next(g)
		if !ok {
			return
		}
		if !r.handle(proc, t, g, m) {
			r.giveBack(g)
			return
		}
	}
}

// handle runs m until it is settled, retrying it in place after each
// delay, kept in flight. It reports false when the group is to be given
// up: m's visibility was lost (SQS delivers it again, so the later
// messages must wait for it), or shutdown came during a retry.
func (r *fifoRun) handle(proc *broker.Processor[*types.Message], t *groupTransport, g *fifoGroup, m *types.Message) bool {
	t.retries = 0
	for {
		rep := proc.ProcessUntil(r.hard, r.stop, m)
		switch {
		case errors.Is(rep.BrokerErr, broker.ErrLockLost):
			return false
		case rep.Action == idem.ActionAck:
			return true // a failed delete: the message comes back as a duplicate
		case rep.Action == idem.ActionDeadLetter && rep.BrokerErr == nil:
			return true
		}
		if r.ctx.Err() != nil && !t.Delivery(m).Last {
			r.returnOne(m)
			return false
		}
		delay := rep.Delay
		if rep.Action == idem.ActionRetry {
			t.retries++
		} else {
			delay = r.c.opts.Backoff(1) // a dead letter that failed: again after the back-off
		}
		r.mu.Lock()
		g.waiting = m
		r.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.hard.Done():
		}
		r.mu.Lock()
		g.waiting = nil
		r.mu.Unlock()
		if r.hard.Err() != nil {
			return false
		}
	}
}

// holdsLast reports whether a message of g not started is on its last
// delivery.
func (r *fifoRun) holdsLast(g *fifoGroup) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range g.queue {
		if r.c.t.Delivery(m).Last {
			return true
		}
	}
	return false
}

// giveBack makes g's messages not started visible again, and ends g.
func (r *fifoRun) giveBack(g *fifoGroup) {
	r.mu.Lock()
	rest := g.queue
	g.queue = nil
	r.mu.Unlock()
	for _, m := range rest {
		r.returnOne(m)
	}
	r.next(g)
}

func (r *fifoRun) returnOne(m *types.Message) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hard), 10*time.Second)
	defer cancel()
	if err := r.c.t.Return(ctx, m); err != nil && !errors.Is(err, broker.ErrLockLost) {
		r.c.eng.ReportError(err)
	}
}

// keepAlive extends, every third of the visibility timeout, the messages
// in hand that the engine does not keep alive: those queued behind their
// group's current one, and one waiting out its retry's delay. A queued
// message whose visibility was lost is dropped with the ones behind it
// (given back), since SQS delivers it again before them.
func (r *fifoRun) keepAlive() {
	every := r.c.t.KeepAliveEvery(nil)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-r.hard.Done():
			return
		}
		type kept struct {
			g *fifoGroup
			m *types.Message
		}
		var ms []kept
		r.mu.Lock()
		for _, g := range r.groups {
			if g.waiting != nil {
				ms = append(ms, kept{g, g.waiting})
			}
			for _, m := range g.queue {
				ms = append(ms, kept{g, m})
			}
		}
		r.mu.Unlock()
		for _, k := range ms {
			ctx, cancel := context.WithTimeout(r.hard, every)
			err := r.c.t.KeepAlive(ctx, k.m)
			cancel()
			switch {
			case errors.Is(err, broker.ErrLockLost):
				r.dropFrom(k.g, k.m)
			case err != nil && r.hard.Err() == nil:
				r.c.eng.ReportError(err)
			}
		}
	}
}

// dropFrom removes m and what is queued behind it from g, giving those
// behind it back.
func (r *fifoRun) dropFrom(g *fifoGroup, m *types.Message) {
	r.mu.Lock()
	var rest []*types.Message
	for i, x := range g.queue {
		if x == m {
			rest = append(rest, g.queue[i+1:]...)
			g.queue = g.queue[:i]
			break
		}
	}
	r.mu.Unlock()
	for _, x := range rest {
		r.returnOne(x)
	}
}
