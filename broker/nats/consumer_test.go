package natsidem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/internal/consumetest"
	"github.com/idemgo/idem/store/memory"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tracker records the stream sequences whose fate is sealed (acked for real,
// or dead-lettered and terminated) and closes done when all of them are.
type tracker struct {
	t      *testing.T
	mu     sync.Mutex
	want   int
	sealed map[uint64]bool
	counts map[idem.Outcome]int
	done   chan struct{}
}

func newTracker(t *testing.T) *tracker {
	return &tracker{t: t, sealed: map[uint64]bool{}, counts: map[idem.Outcome]int{}, done: make(chan struct{})}
}

func (tr *tracker) expect(n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.want = n
	tr.check()
}

func (tr *tracker) check() {
	if tr.want > 0 && len(tr.sealed) == tr.want {
		select {
		case <-tr.done:
		default:
			close(tr.done)
		}
	}
}

func (tr *tracker) onResult(msg jetstream.Msg, r natsidem.Report) {
	seq := seqOf(tr.t, msg)
	lost := false
	if lm, ok := msg.(*lossyMsg); ok {
		lost = lm.ackLost()
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.counts[r.Result.Outcome]++
	if r.BrokerErr == nil && !lost && r.Action != idem.ActionRetry {
		tr.sealed[seq] = true
		tr.check()
	}
}

func (tr *tracker) count(o idem.Outcome) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.counts[o]
}

// TestEffectivelyOnce publishes 2000 unique orders plus producer retries
// (same id and payload, past the broker's duplicate window so JetStream
// stores and delivers them), conflicting re-uses of ids, permanent failures
// and messages without an id. Acks of one first delivery in ten are lost, so
// AckWait redelivers those; one of three competing consumers stops a third of
// the way through. Every order must be applied exactly once and every
// conflict, permanent failure and keyless message must reach the dead-letter
// stream with its reason.
func TestEffectivelyOnce(t *testing.T) {
	e := newEnv(t)
	const (
		unique    = 2000
		perms     = 10
		keyless   = 5
		conflicts = 20
	)
	isDup := func(i int) bool { return i%5 == 0 }        // 400 producer retries
	isConflict := func(i int) bool { return i%100 == 1 } // 20 ids re-used with other content
	isTransient := func(i int) bool { return i%25 == 2 } // fail once, then succeed
	originals := make([]*nats.Msg, 0, unique)
	var extras []*nats.Msg
	for i := 0; i < unique; i++ {
		id := fmt.Sprintf("order-%d", i)
		m := nats.NewMsg(fmt.Sprintf("%s.%d", e.subject, i%7))
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = fmt.Appendf(nil, `{"order":%d,"amount":%d}`, i, 100+i)
		originals = append(originals, m)
		if isDup(i) {
			d := nats.NewMsg(m.Subject)
			d.Header.Set(jetstream.MsgIDHeader, id)
			d.Data = m.Data
			extras = append(extras, d)
		}
		if isConflict(i) {
			c := nats.NewMsg(m.Subject)
			c.Header.Set(jetstream.MsgIDHeader, id)
			c.Data = fmt.Appendf(nil, `{"order":%d,"amount":%d}`, i, 999999)
			extras = append(extras, c)
		}
	}
	for i := 0; i < perms; i++ {
		m := nats.NewMsg(e.subject + ".perm")
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("perm-%d", i))
		m.Data = []byte(`{"bad":true}`)
		extras = append(extras, m)
	}
	for i := 0; i < keyless; i++ {
		m := nats.NewMsg(e.subject + ".nokey")
		m.Data = fmt.Appendf(nil, `{"keyless":%d}`, i)
		extras = append(extras, m)
	}
	e.publishAll(t, originals)
	// Let the broker's duplicate window pass (a property of the server's
	// clock, not a hand-off between goroutines): the retries then model a
	// producer that re-sends minutes later, and the stream stores them.
	time.Sleep(3 * dupWindow)
	e.publishAll(t, extras)
	total := int(e.streamMsgs(t))
	stored := total - unique - perms - keyless - conflicts // retries the broker kept
	t.Logf("stream holds %d messages (%d producer retries stored)", total, stored)
	if stored < 1 {
		t.Fatalf("the broker dropped every producer retry (%d stored); the test would not exercise consumer dedup", stored)
	}

	store := memory.New()
	var fx consumetest.Effects
	var failedMu sync.Mutex
	failed := map[string]bool{}
	handler := natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if strings.HasPrefix(id, "perm-") {
			return nil, idem.Permanent(errors.New("order rejected"))
		}
		var n int
		if _, err := fmt.Sscanf(id, "order-%d", &n); err == nil && isTransient(n) {
			failedMu.Lock()
			first := !failed[id]
			failed[id] = true
			failedMu.Unlock()
			if first {
				return nil, errors.New("payment service unavailable")
			}
		}
		fx.Add(id)
		return []byte("charged " + id), nil
	})

	cons := e.consumer(t, "billing", time.Second)
	lossy := loseFirstAck(cons, 10, 3)
	tr := newTracker(t)
	tr.expect(total)

	newGuard := func() *idem.Guard {
		g, err := natsidem.NewGuard(store, cons, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	opts := func(onResult func(jetstream.Msg, natsidem.Report)) natsidem.Options {
		return natsidem.Options{
			JetStream:         e.js,
			DeadLetterSubject: e.dlq,
			Concurrency:       4,
			Backoff:           idem.ExponentialBackoff(20*time.Millisecond, 200*time.Millisecond),
			OnResult:          onResult,
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Consumer A stops a third of the way through, with work in flight.
	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	var handledA int
	var muA sync.Mutex
	errs := make(chan error, 2)
	errA := make(chan error, 1)
	gA := newGuard()
	go func() {
		errA <- natsidem.Consume(ctxA, lossy, gA, handler, opts(func(m jetstream.Msg, r natsidem.Report) {
			tr.onResult(m, r)
			muA.Lock()
			handledA++
			if handledA == total/3 {
				cancelA()
			}
			muA.Unlock()
		}))
	}()
	for range 2 {
		g := newGuard()
		go func() {
			errs <- natsidem.Consume(ctx, lossy, g, handler, opts(tr.onResult))
		}()
	}

	consumetest.AwaitSettled(t, tr.done, errs, tr.settled, total)
	cancel()
	for _, ch := range []chan error{errA, errs, errs} {
		if err := <-ch; err != nil {
			t.Errorf("Consume returned %v after shutdown, want nil", err)
		}
	}

	tr.mu.Lock()
	t.Logf("outcomes: %v", tr.counts)
	tr.mu.Unlock()
	consumetest.AppliedOnce(t, "applied", fx.Snapshot(), unique)
	// Every stored copy beyond the first of each id was recognised.
	if d := tr.count(idem.OutcomeDuplicate); d < stored {
		t.Errorf("%d duplicates detected, want at least the %d stored producer retries", d, stored)
	}

	reasons := map[string]int{}
	for _, dl := range e.deadLetters(t) {
		reason := hdr(dl, natsidem.HeaderReason)
		reasons[reason]++
		if hdr(dl, natsidem.HeaderError) == "" || !strings.HasPrefix(hdr(dl, natsidem.HeaderSubject), e.subject+".") {
			t.Errorf("dead letter lacks error or original subject: %v", dl.Header)
		}
		if reason == "conflict" {
			var n int
			if _, err := fmt.Sscanf(hdr(dl, natsidem.HeaderMsgID), "order-%d", &n); err != nil || !isConflict(n) {
				t.Errorf("conflict dead letter for unexpected id %q", hdr(dl, natsidem.HeaderMsgID))
			}
		}
	}
	want := map[string]int{"conflict": conflicts, "permanent": perms, "no_key": keyless}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("dead letters by reason = %v, want %v", reasons, want)
	}
}

func (tr *tracker) settled() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.sealed)
}
