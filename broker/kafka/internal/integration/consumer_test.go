package integration_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

// workload is what a test produces: originals, re-sent duplicates (same id,
// same value) and conflicts (same id, other value), partition by partition.
type workload struct {
	recs      []*kgo.Record
	ids       []string // ids of the originals
	dups      int
	conflicts int
}

func buildWorkload(topic string, parts int32, perPart int) *workload {
	w := &workload{}
	for p := range parts {
		id := func(seq int) string { return fmt.Sprintf("p%d-%d", p, seq) }
		for seq := range perPart {
			r := kafka.Record(topic, "", id(seq), payload(p, seq))
			r.Partition = p
			w.recs = append(w.recs, r)
			w.ids = append(w.ids, id(seq))
			if seq%10 == 9 { // a producer re-send of an earlier record
				d := kafka.Record(topic, "", id(seq-5), payload(p, seq-5))
				d.Partition = p
				w.recs = append(w.recs, d)
				w.dups++
			}
			if seq%97 == 50 { // an id reused for other content
				c := kafka.Record(topic, "", id(seq-3), []byte(`{"conflict":true}`), kafka.WithHeader("trace", "x"))
				c.Partition = p
				w.recs = append(w.recs, c)
				w.conflicts++
			}
		}
	}
	return w
}

// offsetIDs maps partition and offset to the record's id once produced.
func (w *workload) offsetIDs() map[int32]map[int64]string {
	out := make(map[int32]map[int64]string)
	for _, r := range w.recs {
		if out[r.Partition] == nil {
			out[r.Partition] = make(map[int64]string)
		}
		out[r.Partition][r.Offset] = string(r.Headers[0].Value)
	}
	return out
}

// doneBefore returns a commit check: every record before a committed
// offset must be completed in the store (processed, or the original of a
// dead-lettered conflict).
func doneBefore(st *memory.Store, scope string, ids map[int32]map[int64]string) func(int32, int64) error {
	checked := make(map[int32]int64) // offsets below are known done; the watch serialises calls
	return func(p int32, off int64) error {
		for o := checked[p]; o < off; o++ {
			id, ok := ids[p][o]
			if !ok {
				return fmt.Errorf("partition %d: commit %d past the end", p, off)
			}
			rec, err := st.Get(context.Background(), idem.Key{Scope: scope, ID: id})
			if err != nil || rec.State != idem.StateCompleted {
				return fmt.Errorf("partition %d: committed %d but offset %d (%s) is not done (%v %v)", p, off, o, id, rec.State, err)
			}
		}
		checked[p] = max(checked[p], off)
		return nil
	}
}

// running is one consumer of the test group.
type running struct {
	t      *testing.T
	cl     *kgo.Client
	c      *kafka.Consumer
	cancel context.CancelFunc
	done   chan error
}

func startConsumer(t *testing.T, e *env, g *idem.Guard, opts kafka.Options, h kafka.Handler) *running {
	t.Helper()
	cl := e.consumerClient()
	if opts.DeadLetterTopic == "" {
		opts.DeadLetterTopic = e.dlq
	}
	r := runOn(t, cl, g, h, opts)
	t.Cleanup(func() { r.stop(nil) })
	return r
}

// runOn builds a consumer on cl and runs it.
func runOn(t *testing.T, cl *kgo.Client, g *idem.Guard, h kafka.Handler, opts kafka.Options) *running {
	t.Helper()
	c, err := kafka.NewConsumer(cl, g, h, opts)
	if err != nil {
		cl.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, cl: cl, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	return r
}

// stop ends Run, checks its error with ok (nil: must be nil), and closes
// the client. It is idempotent.
func (r *running) stop(ok func(error) bool) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	err := <-r.done
	if ok == nil && err != nil || ok != nil && !ok(err) {
		r.t.Errorf("Run returned %v", err)
	}
	r.cl.Close()
}

func orderHandler(t *testing.T, eff *effects) kafka.Handler {
	return kafka.Handle(func(ctx context.Context, rec *kgo.Record) ([]byte, error) {
		p, seq, ok := parsePayload(rec.Value)
		if !ok {
			t.Errorf("handler got %s: conflicts must not reach it", rec.Value)
			return nil, idem.Permanent(errors.New("bad payload"))
		}
		k, _ := idem.KeyFromContext(ctx)
		return nil, eff.apply(k.ID, p, seq)
	})
}

func everyNth(n uint32) func(string) bool {
	return func(id string) bool {
		h := fnv.New32a()
		h.Write([]byte(id))
		return h.Sum32()%n == 0
	}
}

// TestCompetingConsumers runs three consumers of one group over thousands
// of records with re-sent duplicates, conflicts and transient handler
// failures, with members joining and leaving (rebalances) mid-way.
func TestCompetingConsumers(t *testing.T) {
	e := newEnv(t, "orders", 6)
	w := buildWorkload(e.topic, 6, 400)
	e.produce(w.recs...)
	counter := &idem.Counter{}
	g, st := newGuard(t, e, counter)
	e.commit.setCheck(doneBefore(st, e.group, w.offsetIDs()))
	eff := newEffects(everyNth(13))
	h := orderHandler(t, eff)
	opts := kafka.Options{Concurrency: 3, Backoff: idem.ExponentialBackoff(5e6, 50e6), CommitInterval: 50e6}

	c1 := startConsumer(t, e, g, opts, h)
	eventually(t, "the first consumer to make progress", func() bool { return eff.unique() >= 300 })
	startConsumer(t, e, g, opts, h)
	startConsumer(t, e, g, opts, h)
	eventually(t, "more progress with three members", func() bool { return eff.unique() >= 1200 })
	c1.stop(nil)
	e.waitCommitted(t)

	eff.check(t, w.ids)
	if v := e.commit.violations(); len(v) > 0 {
		t.Errorf("%d commits passed unfinished records, first: %s", len(v), v[0])
	}
	if n := counter.Count(idem.OutcomeDuplicate); n < int64(w.dups) {
		t.Errorf("%d duplicates observed, want at least the %d re-sent", n, w.dups)
	}
	if n := counter.Count(idem.OutcomeFailed); n == 0 {
		t.Error("no transient failure was injected")
	}
	for _, r := range e.dlqRecords(w.conflicts) {
		checkDeadLetter(t, r, e.topic, "conflict")
	}
}

func checkDeadLetter(t *testing.T, r *kgo.Record, topic, reason string) {
	t.Helper()
	h := func(name string) string {
		for _, x := range r.Headers {
			if x.Key == name {
				return string(x.Value)
			}
		}
		return ""
	}
	if got := h(kafka.HeaderReason); got != reason {
		t.Errorf("dead letter reason %q, want %q", got, reason)
	}
	if h(kafka.HeaderError) == "" || h(kafka.DefaultKeyHeader) == "" {
		t.Errorf("dead letter lacks the error or the original headers: %v", r.Headers)
	}
	if h(kafka.HeaderOriginalTopic) != topic {
		t.Errorf("dead letter original topic %q", h(kafka.HeaderOriginalTopic))
	}
	if _, err := strconv.ParseInt(h(kafka.HeaderOriginalOffset), 10, 64); err != nil {
		t.Errorf("dead letter original offset: %v", err)
	}
	if _, err := strconv.ParseInt(h(kafka.HeaderOriginalPartition), 10, 32); err != nil {
		t.Errorf("dead letter original partition: %v", err)
	}
	if reason == "conflict" && (string(r.Value) != `{"conflict":true}` || h("trace") != "x") {
		t.Errorf("dead letter lost the value or headers: %s %v", r.Value, r.Headers)
	}
}

// TestRedeliveryAfterCrash stops a consumer whose commits all fail (a crash
// before committing, as the broker sees it) and starts another in the same
// group: everything is redelivered, and what the first did is skipped.
func TestRedeliveryAfterCrash(t *testing.T) {
	e := newEnv(t, "crash", 3)
	w := buildWorkload(e.topic, 3, 300)
	e.produce(w.recs...)
	eff := newEffects(everyNth(11))
	h := orderHandler(t, eff)
	opts := kafka.Options{Concurrency: 3, Backoff: idem.ExponentialBackoff(5e6, 50e6), CommitInterval: 50e6}

	e.commit.setFail(true)
	g1, st := newGuard(t, e, nil)
	var commitErrs atomic.Int32
	opts1 := opts
	opts1.Hooks.OnError = func(err error) {
		if errors.As(err, new(*kafka.CommitError)) {
			commitErrs.Add(1)
		}
	}
	a := startConsumer(t, e, g1, opts1, h)
	eventually(t, "the first consumer to make progress", func() bool { return eff.unique() >= 300 })
	// Close the client under the running consumer, as a crashing process
	// would drop its connections: Run stops with ErrClientClosed.
	a.cl.Close()
	if err := <-a.done; !errors.Is(err, kgo.ErrClientClosed) {
		t.Errorf("Run after Close = %v, want ErrClientClosed", err)
	}
	a.cancel()
	a.cancel = nil
	for p, o := range e.committed() {
		if o != -1 {
			t.Fatalf("partition %d committed at %d although commits failed", p, o)
		}
	}
	before := eff.unique()

	e.commit.setFail(false)
	counter := &idem.Counter{}
	g2, err := idem.New(st, idem.Options{Scope: e.group, Observer: counter})
	if err != nil {
		t.Fatal(err)
	}
	startConsumer(t, e, g2, opts, h)
	e.waitCommitted(t)

	eff.check(t, w.ids)
	if n := counter.Count(idem.OutcomeDuplicate); n < int64(before) {
		t.Errorf("second consumer skipped %d duplicates, want at least the %d records done before the crash", n, before)
	}
	if commitErrs.Load() == 0 {
		t.Error("no commit error reported to OnError")
	}
	for _, r := range e.dlqRecords(w.conflicts) {
		checkDeadLetter(t, r, e.topic, "conflict")
	}
}
