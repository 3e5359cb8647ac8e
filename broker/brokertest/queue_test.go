package brokertest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
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
// queue with at-least-once redelivery and a delivery limit, consumed by
// the engine (broker.NewConsumer over the queue's transport) as every
// adapter is: it holds the suite and the engine to account (a case that
// fails here is the suite's bug or the engine's), and shows an adapter's
// author what a transport is.
func TestSuiteOnReferenceQueue(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker { return newQueue() })
}

// delivery is one message on the queue; it is in one place at a time (the
// ready channel, a timer, one consumer's hands), which owns its count.
type delivery struct {
	msg   brokertest.Message
	seq   int
	count int // deliveries so far
}

// received is one delivery as a consumer received it: the engine's M. Its
// count is a copy, so that a killed consumer still winding down reads it
// while the queue redelivers the message to another.
type received struct {
	d     *delivery
	count int
}

// queue is the broker: a ready channel, the dead letters, and a delivery
// limit that, as a quorum queue's or Service Bus's, dead-letters on the
// broker's side (without idem's headers) a message handed back or left
// unsettled at its last allowed delivery.
type queue struct {
	ready chan *delivery
	seq   atomic.Int64
	mu    sync.Mutex
	limit int // the delivery limit, from the latest consumer started (0: none)
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

// deadLetter stores d's message as a dead letter with headers (idem's
// from the engine, or the broker's own at the limit), the original's
// headers and its position.
func (q *queue) deadLetter(d *delivery, headers map[string]string) {
	h := maps.Clone(headers)
	maps.Copy(h, d.msg.Headers)
	h["Queue-Original-Seq"] = strconv.Itoa(d.seq)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dls = append(q.dls, brokertest.DeadLetter{ID: d.msg.ID, Payload: d.msg.Payload, Headers: h})
	q.dlMsg = append(q.dlMsg, d.msg)
}

// redeliver puts d back after delay, unless it has had its last allowed
// delivery: then the broker dead-letters it, as it would drop it, without
// idem's headers.
func (q *queue) redeliver(d *delivery, delay time.Duration) {
	q.mu.Lock()
	limit := q.limit
	q.mu.Unlock()
	if limit > 0 && d.count >= limit {
		q.deadLetter(d, map[string]string{"Queue-Reason": "delivery limit reached"})
		return
	}
	if delay <= 0 {
		q.ready <- d
		return
	}
	time.AfterFunc(delay, func() { q.ready <- d })
}

// errConnClosed is what a killed consumer's settling calls meet.
var errConnClosed = errors.New("reference queue: connection closed")

// transport is one consumer's connection to the queue: a broker.Transport,
// and a Returner for the deliveries the engine gives back unhandled.
type transport struct {
	q        *queue
	limit    int
	mu       sync.Mutex
	killed   bool
	inflight map[*received]bool // received and not settled
}

func (tr *transport) Receive(ctx context.Context, n int) ([]*received, error) {
	var d *delivery
	select {
	case d = <-tr.q.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := []*delivery{d}
more:
	for len(out) < n {
		select {
		case d := <-tr.q.ready:
			out = append(out, d)
		default:
			break more
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.killed {
		for _, d := range out {
			tr.q.ready <- d
		}
		return nil, fmt.Errorf("%w: %w", broker.ErrClosed, errConnClosed)
	}
	rs := make([]*received, len(out))
	for i, d := range out {
		d.count++
		rs[i] = &received{d: d, count: d.count}
		tr.inflight[rs[i]] = true
	}
	return rs, nil
}

func (tr *transport) Message(r *received) idem.Message { return messageOf(r) }

func (tr *transport) Delivery(r *received) broker.Delivery {
	return broker.Delivery{Attempt: r.count, Last: tr.limit > 0 && r.count >= tr.limit}
}

// settle takes d out of this connection's hands; a killed connection
// settles nothing (the broker has redelivered what it held).
func (tr *transport) settle(r *received) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.killed || !tr.inflight[r] {
		return errConnClosed
	}
	delete(tr.inflight, r)
	return nil
}

func (tr *transport) Ack(_ context.Context, r *received) error { return tr.settle(r) }

func (tr *transport) Retry(_ context.Context, r *received, delay time.Duration) error {
	if err := tr.settle(r); err != nil {
		return err
	}
	tr.q.redeliver(r.d, delay)
	return nil
}

func (tr *transport) DeadLetter(_ context.Context, r *received, dl broker.DeadLetter) error {
	if err := tr.settle(r); err != nil {
		return err
	}
	tr.q.deadLetter(r.d, dl.Headers)
	return nil
}

// Return gives r back unhandled at once, its delivery not counted.
func (tr *transport) Return(_ context.Context, r *received) error {
	if err := tr.settle(r); err != nil {
		return err
	}
	r.d.count--
	tr.q.ready <- r.d
	return nil
}

// kill closes the connection: what it held unsettled is redelivered now.
func (tr *transport) kill() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.killed = true
	for r := range tr.inflight {
		tr.q.redeliver(r.d, 0)
	}
	clear(tr.inflight)
}

// running is a consumer's Run over its transport.
type running struct {
	tr     *transport
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func (q *queue) Start(_ context.Context, c brokertest.Consumer) (brokertest.Running, error) {
	h := broker.Handle(func(ctx context.Context, r *received) ([]byte, error) { return c.Handle(ctx, messageOf(r)) })
	if c.HandleTx != nil {
		h = broker.HandleTx(func(ctx context.Context, tx *sql.Tx, r *received) ([]byte, error) {
			return c.HandleTx(ctx, tx, messageOf(r))
		})
	}
	backoff := c.RetryBackoff
	if backoff == 0 {
		backoff = 50 * time.Millisecond
	}
	q.mu.Lock()
	q.limit = c.MaxDeliveries
	q.mu.Unlock()
	tr := &transport{q: q, limit: c.MaxDeliveries, inflight: map[*received]bool{}}
	cons, err := broker.NewConsumer[*received](tr, c.Guard, h, broker.Options[*received]{
		Concurrency:   c.Concurrency,
		Backoff:       func(int) time.Duration { return backoff },
		MaxDeliveries: c.MaxDeliveries,
		Hooks:         hooksOf(c.Hooks),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{tr: tr, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- cons.Run(ctx) }()
	return r, nil
}

// messageOf is the guard's view of a delivery (an adapter's MessageOf).
func messageOf(r *received) idem.Message {
	return idem.Message{ID: r.d.msg.ID, Payload: r.d.msg.Payload, Headers: r.d.msg.Headers}
}

// hooksOf are the suite's hooks on the queue's deliveries.
func hooksOf(h broker.Hooks[idem.Message]) broker.Hooks[*received] {
	wrap := func(f func(context.Context, idem.Message, broker.Report)) func(context.Context, *received, broker.Report) {
		if f == nil {
			return nil
		}
		return func(ctx context.Context, m *received, r broker.Report) { f(ctx, messageOf(m), r) }
	}
	return broker.Hooks[*received]{
		BeforeSettle: wrap(h.BeforeSettle),
		AfterSettle:  wrap(h.AfterSettle),
		OnDeadLetter: wrap(h.OnDeadLetter),
		OnError:      h.OnError,
	}
}

func (r *running) Stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// Kill closes the connection at once, as a crash does, and lets Run wind
// down in the background: nothing it settles from now on reaches the
// queue.
func (r *running) Kill() {
	r.once.Do(func() {
		r.tr.kill()
		r.cancel()
	})
}
