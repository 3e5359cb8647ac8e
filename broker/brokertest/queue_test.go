package brokertest_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
)

// TestSuiteOnReferenceQueue runs the suite against a small in-process
// queue with at-least-once redelivery, which settles the way every adapter
// must: it holds the suite itself to account (a case that fails here is the
// suite's bug), and shows an adapter's author what the suite asks.
func TestSuiteOnReferenceQueue(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newQueue() })
}

type delivery struct {
	msg   brokertest.Message
	seq   int
	count int
}

type queue struct {
	ready chan *delivery
	seq   atomic.Int64
	mu    sync.Mutex
	dls   []brokertest.DeadLetter
	dlMsg []brokertest.Message // the original of each dead letter, for Replay
	nrep  int                  // dead letters replayed so far
}

func newQueue() *queue { return &queue{ready: make(chan *delivery, 1<<16)} }

func (q *queue) Features() brokertest.Features {
	return brokertest.Features{DeliveryLimit: true, Skip: map[string]string{"OrderKept": "the reference queue redelivers out of order"}}
}

func (q *queue) Publish(_ context.Context, msgs ...brokertest.Message) error {
	for _, m := range msgs {
		q.ready <- &delivery{msg: m, seq: int(q.seq.Add(1))}
	}
	return nil
}

func (q *queue) DeadLetters(context.Context) ([]brokertest.DeadLetter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]brokertest.DeadLetter(nil), q.dls...), nil
}

// Replay puts the original of every dead letter not yet replayed back on
// the queue, as an adapter's Replay re-publishes it with its id.
func (q *queue) Replay(ctx context.Context) (int, error) {
	q.mu.Lock()
	msgs := q.dlMsg[q.nrep:]
	q.nrep = len(q.dlMsg)
	q.mu.Unlock()
	return len(msgs), q.Publish(ctx, msgs...)
}

type consumer struct {
	q       *queue
	c       brokertest.Consumer
	h       broker.Handler[idem.Message]
	stop    chan struct{}
	killed  atomic.Bool
	wg      sync.WaitGroup
	stopped sync.Once
}

func (q *queue) Start(_ context.Context, c brokertest.Consumer) (brokertest.Running, error) {
	h := broker.Handle(func(ctx context.Context, m idem.Message) ([]byte, error) { return c.Handle(ctx, m) })
	if c.HandleTx != nil {
		h = broker.HandleTx(func(ctx context.Context, tx *sql.Tx, m idem.Message) ([]byte, error) { return c.HandleTx(ctx, tx, m) })
	}
	if err := h.Check(c.Guard); err != nil {
		return nil, err
	}
	cs := &consumer{q: q, c: c, h: h, stop: make(chan struct{})}
	n := max(c.Concurrency, 1)
	for range n {
		cs.wg.Add(1)
		go cs.work()
	}
	return cs, nil
}

func (cs *consumer) work() {
	defer cs.wg.Done()
	for {
		select {
		case <-cs.stop:
			return
		case d := <-cs.q.ready:
			cs.handle(d)
		}
	}
}

func (cs *consumer) handle(d *delivery) {
	d.count++
	cs.process(d)
}

func (cs *consumer) process(d *delivery) {
	im := idem.Message{ID: d.msg.ID, Payload: d.msg.Payload, Headers: d.msg.Headers}
	g := cs.c.Guard
	backoff := cs.c.RetryBackoff
	if backoff == 0 {
		backoff = 50 * time.Millisecond
	}
	res, err := cs.h.Run(context.Background(), g, im, im)
	r := broker.Decide(res, err, g.Options().Clock(), d.count, func(int) time.Duration { return backoff })
	hooks := cs.c.Hooks
	hooks.CallBeforeSettle(context.Background(), im, r)
	if cs.killed.Load() {
		// The connection is gone: the broker redelivers what was unsettled.
		cs.q.ready <- d
		return
	}
	if r.Action == idem.ActionRetry && cs.c.MaxDeliveries > 0 && d.count >= cs.c.MaxDeliveries {
		r.Action, r.Reason = idem.ActionDeadLetter, broker.ReasonMaxDeliver
	}
	switch {
	case r.Action == idem.ActionRetry && errors.Is(err, idem.ErrInProgress):
		// A live holder: keep the delivery (as JetStream's InProgress
		// does) and try again when its lease ends, spending no delivery.
		hooks.CallAfterSettle(context.Background(), im, r)
		select {
		case <-time.After(r.Delay):
			cs.process(d)
		case <-cs.stop:
			cs.q.ready <- d
		}
		return
	case r.Action == idem.ActionRetry:
		time.AfterFunc(r.Delay, func() { cs.q.ready <- d })
	case r.Action == idem.ActionDeadLetter:
		h := idem.DeadLetterHeaders(res, err)
		h[idem.HeaderReason] = r.Reason
		for k, v := range d.msg.Headers {
			h[k] = v
		}
		h["Idem-Original-Seq"] = strconv.Itoa(d.seq)
		cs.q.mu.Lock()
		cs.q.dls = append(cs.q.dls, brokertest.DeadLetter{ID: d.msg.ID, Payload: d.msg.Payload, Headers: h})
		cs.q.dlMsg = append(cs.q.dlMsg, d.msg)
		cs.q.mu.Unlock()
		hooks.CallOnDeadLetter(context.Background(), im, r)
	}
	hooks.CallAfterSettle(context.Background(), im, r)
}

func (cs *consumer) Stop() error {
	cs.stopped.Do(func() { close(cs.stop) })
	cs.wg.Wait()
	return nil
}

func (cs *consumer) Kill() {
	cs.killed.Store(true)
	cs.stopped.Do(func() { close(cs.stop) })
}
