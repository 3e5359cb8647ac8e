package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

const dlqSuffix = ".dlq"

// env is one in-process Kafka cluster with a topic, its dead-letter topic
// and a plain client for producing and admin calls.
type env struct {
	t      testing.TB
	c      *kfake.Cluster
	topic  string
	dlq    string
	group  string
	parts  int32
	cl     *kgo.Client // producer and admin, no group
	adm    *kadm.Client
	commit commitWatch
}

func newEnv(t testing.TB, topic string, parts int32) *env {
	t.Helper()
	return newEnvWith(t, topic, parts)
}

// newEnvWith is newEnv with more cluster options.
func newEnvWith(t testing.TB, topic string, parts int32, opts ...kfake.Opt) *env {
	t.Helper()
	dlq := topic + dlqSuffix
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, topic), kfake.SeedTopics(1, dlq)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e := &env{t: t, c: c, topic: topic, dlq: dlq, group: topic + "-group", parts: parts, cl: cl, adm: kadm.NewClient(cl)}
	e.commit.offsets = make(map[int32]int64)
	c.ControlKey(int16(kmsg.OffsetCommit), e.commit.control(c, e.group))
	return e
}

// groupOpts are the settings of a group client on the cluster, then extra.
func (e *env) groupOpts(extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(e.c.ListenAddrs()...),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topic),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, extra...)
}

// consumerClient builds a group client the way users are told to.
func (e *env) consumerClient(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	cl, err := kgo.NewClient(kafka.ClientOptions(e.groupOpts(extra...)...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// produce writes recs synchronously and returns them with their offsets.
func (e *env) produce(recs ...*kgo.Record) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// endOffsets returns the end offset of every partition of the topic.
func (e *env) endOffsets() map[int32]int64 { return e.ends(e.topic) }

// ends returns the end offset of every partition of topic.
func (e *env) ends(topic string) map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[int32]int64)
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// committed returns the group's committed offsets read back from the
// cluster (-1 where nothing is committed).
func (e *env) committed() map[int32]int64 { return e.groupCommitted(e.group) }

// groupCommitted returns group's committed offsets on e's topic (-1 where
// nothing is committed).
func (e *env) groupCommitted(group string) map[int32]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os, err := e.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		e.t.Fatal(err)
	}
	out := make(map[int32]int64)
	for p := range e.parts {
		out[p] = -1
		if o, ok := os.Lookup(e.topic, p); ok && o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// allCommitted reports whether every partition's commit reached its end.
func (e *env) allCommitted() bool {
	end, got := e.endOffsets(), e.committed()
	for p, o := range end {
		if got[p] != o && (o != 0 || got[p] != -1) { // an empty partition has nothing to commit
			return false
		}
	}
	return true
}

// waitCommitted waits until every partition's commit reached its end (or a
// commit check failed), then asserts the commits are exactly at the ends and
// that no commit passed an unfinished record.
func (e *env) waitCommitted(t *testing.T) {
	t.Helper()
	eventually(t, "every offset committed", func() bool {
		if len(e.commit.violations()) > 0 {
			return true
		}
		end, got := e.endOffsets(), e.committed()
		for p, o := range end {
			if got[p] < o && (o != 0 || got[p] != -1) {
				return false
			}
		}
		return true
	})
	if v := e.commit.violations(); len(v) > 0 {
		t.Fatalf("%d commits passed unfinished records, first: %s", len(v), v[0])
	}
	if !e.allCommitted() {
		t.Fatalf("committed %v, end offsets %v", e.committed(), e.endOffsets())
	}
}

// dlqEnd returns the end offset of the dead-letter topic: how many dead
// letters were written.
func (e *env) dlqEnd() int64 { return e.ends(e.dlq)[0] }

// dlqRecords reads the whole dead-letter topic.
func (e *env) dlqRecords(want int) []*kgo.Record {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...), kgo.ConsumeTopics(e.dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("dead-letter topic: got %d records, want %d", len(out), want)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// commitWatch sees every OffsetCommit the group sends, before the broker
// applies it, and lets a test check it or make it fail.
type commitWatch struct {
	mu      sync.Mutex
	check   func(partition int32, offset int64) error
	fail    bool
	offsets map[int32]int64 // highest offset committed per partition
	bad     []string
}

func (w *commitWatch) control(c *kfake.Cluster, group string) func(kmsg.Request) (kmsg.Response, error, bool) {
	return func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.fail {
			resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
			resp.Version = req.Version
			for _, rt := range req.Topics {
				t := kmsg.NewOffsetCommitResponseTopic()
				t.Topic, t.TopicID = rt.Topic, rt.TopicID
				for _, rp := range rt.Partitions {
					p := kmsg.NewOffsetCommitResponseTopicPartition()
					p.Partition, p.ErrorCode = rp.Partition, kerr.UnknownServerError.Code
					t.Partitions = append(t.Partitions, p)
				}
				resp.Topics = append(resp.Topics, t)
			}
			return resp, nil, true
		}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if w.check != nil {
					if err := w.check(rp.Partition, rp.Offset); err != nil {
						w.bad = append(w.bad, err.Error())
					}
				}
				w.offsets[rp.Partition] = max(w.offsets[rp.Partition], rp.Offset)
			}
		}
		return nil, nil, false
	}
}

func (w *commitWatch) setFail(fail bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = fail
}

func (w *commitWatch) setCheck(f func(partition int32, offset int64) error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.check = f
}

func (w *commitWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bad...)
}

// waitFor is how long a test waits for a state before it fails.
const waitFor = 25 * time.Second

// eventually waits for cond, checking it every few milliseconds: the
// consumer works in the background and the test waits for a state, never
// for a duration.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// waitClosed waits for ch to be closed (a handler entered, a holder
// started) as long as eventually waits, and fails the test after that, so
// that a step that never comes fails the test instead of hanging it.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// effects is the business side: what the handlers did, once per key if
// idem works.
type effects struct {
	mu     sync.Mutex
	count  map[string]int
	order  map[int32][]int // per source partition, the seq of each first effect
	fails  map[string]int  // injected failures already served per id
	failOn func(id string) bool
}

func newEffects(failOn func(id string) bool) *effects {
	return &effects{count: make(map[string]int), order: make(map[int32][]int), fails: make(map[string]int), failOn: failOn}
}

var errInjected = errors.New("injected transient failure")

// apply is the handler body: fail once for chosen ids, else count the
// effect and note its order.
func (f *effects) apply(id string, partition int32, seq int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOn != nil && f.failOn(id) && f.fails[id] == 0 {
		f.fails[id]++
		return errInjected
	}
	f.count[id]++
	if f.count[id] == 1 {
		f.order[partition] = append(f.order[partition], seq)
	}
	return nil
}

func (f *effects) unique() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.count)
}

// check asserts once-per-key effects for want ids and in-order first
// effects per partition.
func (f *effects) check(t *testing.T, want []string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.count) != len(want) {
		t.Errorf("effects for %d keys, want %d", len(f.count), len(want))
	}
	for _, id := range want {
		if n := f.count[id]; n != 1 {
			t.Errorf("key %s: %d effects, want 1", id, n)
		}
	}
	for p, seqs := range f.order {
		if !sort.IntsAreSorted(seqs) {
			t.Errorf("partition %d: first effects out of order: %v", p, seqs)
		}
	}
}

// newGuard returns a guard over a fresh memory store, scoped by the test
// group (as kafka.NewGuard scopes one).
func newGuard(t testing.TB, e *env, obs idem.Observer) (*idem.Guard, *memory.Store) {
	t.Helper()
	st := memory.New()
	g, err := idem.New(st, idem.Options{Scope: e.group, Observer: obs, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

// payload encodes where an original record was produced.
func payload(partition int32, seq int) []byte {
	return fmt.Appendf(nil, `{"partition":%d,"seq":%d}`, partition, seq)
}

func parsePayload(b []byte) (partition int32, seq int, ok bool) {
	_, err := fmt.Sscanf(string(b), `{"partition":%d,"seq":%d}`, &partition, &seq)
	return partition, seq, err == nil
}
