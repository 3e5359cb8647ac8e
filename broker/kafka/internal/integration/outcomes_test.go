package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

func idOf(rec *kgo.Record) string {
	for _, h := range rec.Headers {
		if h.Key == kafka.DefaultKeyHeader {
			return string(h.Value)
		}
	}
	return ""
}

// TestInProgressHoldsPartition: a key held by a live owner elsewhere holds
// its partition: later records wait and no commit passes it. When the owner
// gives the key back (its handler failed) the record is claimed again at the
// lease end the consumer saw, and everything proceeds in order.
func TestInProgressHoldsPartition(t *testing.T) {
	e := newEnv(t, "held", 1)
	counter := &idem.Counter{}
	g, st := newGuard(t, e, counter)
	heldWorkload(t, e, st)
	now := time.Now()
	held, err := st.Claim(context.Background(), idem.ClaimRequest{
		Key: idem.Key{Scope: e.group, ID: "b"}, Now: now,
		LeaseUntil: now.Add(500 * time.Millisecond), ExpiresAt: now.Add(time.Hour),
	})
	if err != nil || held.Outcome != idem.ClaimAcquired {
		t.Fatal(held, err)
	}
	eff := newEffects(nil)
	startConsumer(t, e, g, kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, 5*time.Millisecond), CommitInterval: 20 * time.Millisecond}, orderHandler(t, eff))

	eventually(t, "an in-progress answer for b", func() bool { return counter.Count(idem.OutcomeInProgress) >= 1 })
	eventually(t, "a committed", func() bool { return e.committed()[0] >= 1 })

	// The owner gives the key back; had its lease ended first, the consumer
	// retook it as stale and the release finds another owner.
	if err := st.Release(context.Background(), idem.ReleaseRequest{Key: held.Record.Key(), Token: held.Record.Token, Now: time.Now()}); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatal(err)
	}
	e.waitCommitted(t)
	eff.check(t, []string{"a", "b", "c"})
	if got := eff.order[0]; !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("effect order %v", got)
	}
}

// hookLog notes every hook call of a consumer, in order.
type hookLog struct {
	mu    sync.Mutex
	calls []hookCall
	// settled is the offset after the last record whose BeforeSettle
	// returned: no commit may pass it.
	settled int64
}

type hookCall struct {
	hook string // before, dead_letter, after
	id   string
	r    broker.Report
}

func (l *hookLog) note(hook string) func(context.Context, *kgo.Record, broker.Report) {
	return func(_ context.Context, rec *kgo.Record, r broker.Report) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls = append(l.calls, hookCall{hook, idOf(rec), r})
	}
}

func (l *hookLog) hooks() broker.Hooks[*kgo.Record] {
	return broker.Hooks[*kgo.Record]{
		BeforeSettle: func(ctx context.Context, rec *kgo.Record, r broker.Report) {
			l.note("before")(ctx, rec, r)
			// Work at the worst moment to crash: a commit that passed the
			// record now would have passed a record not yet settled.
			time.Sleep(30 * time.Millisecond)
			if r.Action != idem.ActionRetry {
				l.mu.Lock()
				l.settled = rec.Offset + 1
				l.mu.Unlock()
			}
		},
		OnDeadLetter: l.note("dead_letter"),
		AfterSettle:  l.note("after"),
	}
}

func (l *hookLog) commitCheck(_ int32, off int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if off > l.settled {
		return fmt.Errorf("committed %d before BeforeSettle of offset %d returned", off, l.settled)
	}
	return nil
}

// TestDeadLetterReasons: records that retrying cannot fix go to the
// dead-letter topic with their reason, and the partition moves on. Each
// attempt is reported to the hooks in order (BeforeSettle, OnDeadLetter
// once the dead letter is acknowledged, AfterSettle) with one Report, and
// no offset is committed before its record's BeforeSettle returned.
func TestDeadLetterReasons(t *testing.T) {
	e := newEnv(t, "dead", 1)
	e.produce(
		&kgo.Record{Topic: e.topic, Value: []byte("no key")},
		kafka.Record(e.topic, "", "perm", []byte("x")),
		kafka.Record(e.topic, "", "flaky", []byte("x")),
		&kgo.Record{Topic: e.topic, Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: kafka.DefaultKeyHeader, Value: []byte{0xff, 0}}}},
		kafka.Record(e.topic, "", "ok", []byte("x")),
	)
	counter := &idem.Counter{}
	g, _ := newGuard(t, e, counter)
	var ok []string
	h := kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		switch idOf(rec) {
		case "perm":
			return nil, idem.Permanent(errors.New("rejected card"))
		case "flaky":
			return nil, errors.New("upstream down")
		}
		ok = append(ok, idOf(rec)) // one partition: one worker
		return nil, nil
	})
	log := &hookLog{}
	e.commit.setCheck(log.commitCheck)
	opts := kafka.Options{MaxDeliveries: 3, Backoff: idem.ExponentialBackoff(time.Millisecond, 2*time.Millisecond), Hooks: log.hooks(), CommitInterval: 20 * time.Millisecond}
	r := startConsumer(t, e, g, opts, h)
	e.waitCommitted(t)
	r.stop(nil)

	if !slices.Equal(ok, []string{"ok"}) {
		t.Errorf("handled %v, want [ok]", ok)
	}
	want := []string{"no_key", "permanent", broker.ReasonMaxDeliver, "invalid_key"}
	var reasons []string
	for _, c := range log.calls {
		if c.hook == "dead_letter" {
			if c.r.Err == nil {
				t.Errorf("dead letter %s without its cause", c.r.Reason)
			}
			reasons = append(reasons, c.r.Reason)
		}
	}
	if !slices.Equal(reasons, want) {
		t.Errorf("OnDeadLetter saw %v, want %v", reasons, want)
	}
	// Each attempt: before, [dead_letter,] after, with the same report.
	var seq []string
	for i := 0; i < len(log.calls); {
		c := log.calls[i]
		if c.hook != "before" {
			t.Fatalf("hook %d: %s before any BeforeSettle (%+v)", i, c.hook, log.calls)
		}
		n := 2
		if c.r.Action == idem.ActionDeadLetter {
			n = 3
		}
		if i+n > len(log.calls) || log.calls[i+n-1].hook != "after" || (n == 3 && log.calls[i+1].hook != "dead_letter") {
			t.Fatalf("hooks from %d out of order: %+v", i, log.calls[i:])
		}
		if after := log.calls[i+n-1].r; after.Action != c.r.Action || after.Reason != c.r.Reason || after.Attempt != c.r.Attempt {
			t.Errorf("%s: AfterSettle report %+v, BeforeSettle's %+v", c.id, after, c.r)
		}
		seq = append(seq, fmt.Sprintf("%s:%s:%d", c.id, c.r.Action, c.r.Attempt))
		i += n
	}
	wantSeq := []string{":dead_letter:1", "perm:dead_letter:1", "flaky:retry:1", "flaky:retry:2", "flaky:dead_letter:3", "\xff\x00:dead_letter:1", "ok:ack:1"}
	if !slices.Equal(seq, wantSeq) {
		t.Errorf("attempts %v, want %v", seq, wantSeq)
	}
	dl := e.dlqRecords(len(want))
	for i, rec := range dl {
		reason := ""
		for _, h := range rec.Headers {
			if h.Key == kafka.HeaderReason {
				reason = string(h.Value)
			}
		}
		if reason != want[i] {
			t.Errorf("dead letter %d: reason %q, want %q", i, reason, want[i])
		}
	}
	if n := counter.Count(idem.OutcomeFailed); n != 3 {
		t.Errorf("flaky failed %d times, want MaxAttempts=3", n)
	}
	if n := counter.Count(idem.OutcomeNoKey); n != 2 {
		t.Errorf("%d no-key events, want 2 (missing and invalid)", n)
	}
}

// TestMissingKeyProcess: with the guard's MissingKeyProcess policy a record
// without a key is processed without dedup instead of dead-lettered.
func TestMissingKeyProcess(t *testing.T) {
	e := newEnv(t, "unkeyed", 1)
	e.produce(&kgo.Record{Topic: e.topic, Value: []byte("v")}, kafka.Record(e.topic, "", "k", []byte("v")))
	counter := &idem.Counter{}
	g, err := idem.New(memory.New(), idem.Options{Scope: e.group, MissingKey: idem.MissingKeyProcess, Observer: counter})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	startConsumer(t, e, g, kafka.Options{CommitInterval: 20 * time.Millisecond}, kafka.Handle(func(context.Context, *kgo.Record) ([]byte, error) {
		n++ // one partition: one worker
		return nil, nil
	}))
	e.waitCommitted(t)
	if counter.Count(idem.OutcomeUnkeyed) != 1 || counter.Count(idem.OutcomeProcessed) != 1 {
		t.Errorf("outcomes %v", counter.Counts())
	}
}

// TestShutdownFinishesInFlight: cancelling Run lets the in-flight handler
// finish and commits its record before returning.
func TestShutdownFinishesInFlight(t *testing.T) {
	e := newEnv(t, "drain", 1)
	e.produce(kafka.Record(e.topic, "", "slow", []byte("x")))
	g, st := newGuard(t, e, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	r := startConsumer(t, e, g, kafka.Options{CommitInterval: time.Hour}, kafka.Handle(func(ctx context.Context, _ *kgo.Record) ([]byte, error) {
		close(entered)
		<-release
		return []byte("done"), ctx.Err()
	}))
	waitClosed(t, "the handler", entered)
	r.cancel()
	close(release)
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.cancel = nil
	r.cl.Close()
	if got := e.committed()[0]; got != 1 {
		t.Errorf("committed %d after shutdown, want 1", got)
	}
	rec, err := st.Get(context.Background(), idem.Key{Scope: e.group, ID: "slow"})
	if err != nil || rec.State != idem.StateCompleted {
		t.Errorf("record %v %v, want completed", rec.State, err)
	}
}

// TestShutdownReleasesStuck: a handler that outlives DrainTimeout gets its
// context cancelled; its claim is released and its offset not committed,
// so the record is redelivered later.
func TestShutdownReleasesStuck(t *testing.T) {
	e := newEnv(t, "stuck", 1)
	e.produce(kafka.Record(e.topic, "", "stuck", []byte("x")))
	g, st := newGuard(t, e, nil)
	entered := make(chan struct{})
	r := startConsumer(t, e, g, kafka.Options{ShutdownTimeout: 10 * time.Millisecond}, kafka.Handle(func(ctx context.Context, _ *kgo.Record) ([]byte, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	}))
	waitClosed(t, "the handler", entered)
	r.stop(nil)
	if got := e.committed()[0]; got != -1 {
		t.Errorf("committed %d, want nothing", got)
	}
	rec, err := st.Get(context.Background(), idem.Key{Scope: e.group, ID: "stuck"})
	if err != nil || rec.State != idem.StateReleased {
		t.Errorf("record %v %v, want released", rec.State, err)
	}
}

// TestBackpressure: with a tiny buffer the consumer pauses and resumes
// fetching over and over, and still processes every record once, in order.
// A full partition is paused only once the client holds none of its
// fetched records (a pause drops them, to be fetched again), so no record
// is fetched and decoded twice: every record is written before the
// consumer starts, and the first fetch holds them all.
func TestBackpressure(t *testing.T) {
	e := newEnv(t, "pressure", 2)
	w := buildWorkload(e.topic, 2, 150)
	e.produce(w.recs...)
	g, _ := newGuard(t, e, nil)
	eff := newEffects(nil)
	fetched := new(fetchCount)
	r := runOn(t, e.consumerClient(kgo.WithHooks(fetched)), g, orderHandler(t, eff), kafka.Options{Concurrency: 1, MaxBuffered: 8, MaxPollRecords: 5, CommitInterval: 20 * time.Millisecond, DeadLetterTopic: e.dlq})
	t.Cleanup(func() { r.stop(nil) })
	e.waitCommitted(t)
	eff.check(t, w.ids)
	if n := fetched.n.Load(); n != int64(len(w.recs)) {
		t.Errorf("%d records fetched for %d written, want each once", n, len(w.recs))
	}
}

// TestLostPartitionsCancelHandlers: when the group session is lost (the
// coordinator fences the member), in-flight handlers are cancelled at once,
// nothing is committed for them, and the record is processed after the
// member rejoins.
func TestLostPartitionsCancelHandlers(t *testing.T) {
	e := newEnv(t, "lost", 1)
	e.produce(kafka.Record(e.topic, "", "x", []byte("v")))
	g, st := newGuard(t, e, nil)
	entered := make(chan struct{})
	var calls atomic.Int32
	var cancelled atomic.Bool
	// A drain time longer than the test waits: only the loss path, which
	// does not drain, can cancel the handler within the test. Bounded, so
	// that a test that fails before the loss stops in its cleanup (the
	// stopping consumer holds the rebalance, and with it the loss, while
	// it drains) instead of hanging.
	opts := kafka.Options{ShutdownTimeout: time.Minute, CommitInterval: 20 * time.Millisecond}
	startConsumer(t, e, g, opts, kafka.Handle(func(ctx context.Context, _ *kgo.Record) ([]byte, error) {
		if calls.Add(1) > 1 {
			return []byte("ok"), nil
		}
		close(entered)
		<-ctx.Done()
		cancelled.Store(true)
		return nil, ctx.Err()
	}))
	waitClosed(t, "the handler", entered)
	e.c.ControlKey(int16(kmsg.Heartbeat), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.HeartbeatRequest)
		if req.Group != e.group {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.Version = req.Version
		resp.ErrorCode = kerr.IllegalGeneration.Code
		return resp, nil, true
	})
	e.waitCommitted(t)
	if !cancelled.Load() || calls.Load() != 2 {
		t.Errorf("cancelled=%v calls=%d, want the lost handler cancelled and the record run again once", cancelled.Load(), calls.Load())
	}
	rec, err := st.Get(context.Background(), idem.Key{Scope: e.group, ID: "x"})
	if err != nil || rec.State != idem.StateCompleted || rec.Attempts != 2 {
		t.Errorf("record %+v %v", rec, err)
	}
}

// TestDeadLetterProduceFailureHolds: while the dead-letter topic refuses
// writes, the record is held (not committed, later records wait) and the
// failure is reported; once the dead letter is acknowledged, the partition
// moves on.
func TestDeadLetterProduceFailureHolds(t *testing.T) {
	e := newEnv(t, "dlqdown", 1)
	e.produce(kafka.Record(e.topic, "", "perm", []byte("x")), kafka.Record(e.topic, "", "after", []byte("x")))
	var afterRan, afterBeforeDLQ atomic.Bool
	var refused atomic.Int32
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.c.KeepControl()
		if refused.Load() >= 3 {
			afterBeforeDLQ.Store(afterRan.Load())
			e.c.DropControl()
			return nil, nil, false
		}
		refused.Add(1)
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	g, _ := newGuard(t, e, nil)
	var dlErrs atomic.Int32
	opts := kafka.Options{Backoff: idem.ExponentialBackoff(time.Millisecond, 5*time.Millisecond), Hooks: broker.Hooks[*kgo.Record]{OnError: func(err error) {
		if errors.As(err, new(*kafka.DeadLetterError)) {
			dlErrs.Add(1)
		}
	}}, CommitInterval: 20 * time.Millisecond}
	startConsumer(t, e, g, opts, kafka.Handle(func(_ context.Context, rec *kgo.Record) ([]byte, error) {
		if idOf(rec) == "perm" {
			return nil, idem.Permanent(errors.New("rejected"))
		}
		afterRan.Store(true)
		return nil, nil
	}))
	e.waitCommitted(t)
	if afterBeforeDLQ.Load() {
		t.Error("the next record ran before the dead letter was acknowledged")
	}
	if n := dlErrs.Load(); n < 3 {
		t.Errorf("%d dead-letter errors reported, want 3", n)
	}
	checkDeadLetter(t, e.dlqRecords(1)[0], e.topic, "permanent")
}

// TestDeadLetterTimeoutBoundsAProduceInFlight: a dead letter whose produce
// reached the broker and is never answered (a broker that hangs, a
// connection cut mid-request: franz-go cannot take back a record in
// flight, and ProduceSync waits past its context for it) fails after
// DeadLetterTimeout, the record held and tried again, and the consumer's
// Run returns on cancel without waiting for the broker. The record's
// offset is not committed: the next consumer of the group dead-letters it
// once the broker answers, and moves on.
func TestDeadLetterTimeoutBoundsAProduceInFlight(t *testing.T) {
	e := newEnv(t, "dlqhang", 1)
	e.produce(kafka.Record(e.topic, "", "perm", []byte("x")), kafka.Record(e.topic, "", "after", []byte("x")))
	answer := make(chan struct{})
	var answered sync.Once
	release := func() { answered.Do(func() { close(answer) }) }
	t.Cleanup(release) // before the cluster closes (cleanups run last first)
	e.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.c.KeepControl()
		// Every produce from here on is a dead letter's (the records
		// are written): unanswered until release.
		e.c.SleepControl(func() { <-answer })
		return nil, nil, false
	})
	g, _ := newGuard(t, e, nil)
	var dlErrs atomic.Int32
	var afterRan atomic.Bool
	opts := kafka.Options{DeadLetterTopic: e.dlq, DeadLetterTimeout: 200 * time.Millisecond, Backoff: idem.ExponentialBackoff(time.Millisecond, 5*time.Millisecond),
		CommitInterval: 20 * time.Millisecond, Hooks: broker.Hooks[*kgo.Record]{OnError: func(err error) {
			if errors.As(err, new(*kafka.DeadLetterError)) {
				dlErrs.Add(1)
			}
		}}}
	h := kafka.Handle(func(_ context.Context, rec *kgo.Record) ([]byte, error) {
		if idOf(rec) == "perm" {
			return nil, idem.Permanent(errors.New("rejected"))
		}
		afterRan.Store(true)
		return nil, nil
	})
	first := runOn(t, e.consumerClient(), g, h, opts)
	eventually(t, "two dead-letter produces given up after DeadLetterTimeout", func() bool { return dlErrs.Load() >= 2 })
	first.cancel()
	var runErr error
	eventually(t, "Run returned on cancel, the dead letter still unanswered", func() bool {
		select {
		case runErr = <-first.done:
			return true
		default:
			return false
		}
	})
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
	if afterRan.Load() {
		t.Fatal("the next record ran while the dead letter was unanswered")
	}
	release()
	first.cl.Close()
	startConsumer(t, e, g, opts, h)
	e.waitCommitted(t)
	if !afterRan.Load() {
		t.Error("the next record did not run once the dead letter was written")
	}
	checkDeadLetter(t, e.dlqRecords(1)[0], e.topic, "permanent")
}
