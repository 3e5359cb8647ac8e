package kafka

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOptions returns opts followed by the kgo options a Consumer needs on
// its client:
//
//   - kgo.DisableAutoCommit: offsets are committed by the consumer, and only
//     up to records that are done.
//   - kgo.BlockRebalanceOnPoll: a rebalance never runs while the consumer
//     hands fetched records to its partition workers or commits, so it
//     never commits for a partition it no longer owns.
//   - kgo.OnPartitionsRevoked and kgo.OnPartitionsLost: on a revoke the
//     consumer lets in-flight records finish, commits what is done and
//     drops the rest; on a loss it cancels in-flight handlers and commits
//     nothing.
//   - kgo.AdjustFetchOffsetsFn: a consumer running a HandleCheckpoint
//     handler starts each newly assigned partition from the position
//     stored in the database, where there is one; other consumers start
//     from the group's committed offsets, unchanged. An assignment that
//     comes before NewConsumer has seen the client waits for it, up to
//     ConsumerWait: a client on which no Consumer is built then fails
//     fast, its polls reporting ErrNoConsumer (in a kgo.ErrGroupSession),
//     instead of being assigned partitions it never fetches.
//
// Pass the result to kgo.NewClient together with kgo.ConsumerGroup and
// kgo.ConsumeTopics, and build the Consumer on the client right after; a
// poll loop of your own needs a client built without these options. Do not set your own OnPartitionsRevoked or
// OnPartitionsLost on that client: NewConsumer rejects a client whose hooks
// are not the consumer's. An AdjustFetchOffsetsFn of your own set after
// these options replaces the consumer's, which NewConsumer rejects for a
// HandleCheckpoint handler; one set before them is replaced.
func ClientOptions(opts ...kgo.Opt) []kgo.Opt {
	h := &configured{ready: make(chan struct{})}
	return append(append([]kgo.Opt(nil), opts...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(onRevoked),
		kgo.OnPartitionsLost(onLost),
		kgo.AdjustFetchOffsetsFn(h.adjust),
		kgo.WithHooks(h),
	)
}

// configured marks a client built with ClientOptions. kgo wraps the
// rebalance hooks it is given, so their identity cannot be checked; this
// hook's can. kgo accepts only hooks that implement one of its interfaces,
// so it implements a no-op OnNewClient.
//
// It also carries the client's consumer to the client's
// AdjustFetchOffsetsFn, which, unlike the rebalance hooks, is not given
// the client. The consumer is held weakly, as in the registry.
type configured struct {
	c     atomic.Pointer[weak.Pointer[Consumer]]
	once  sync.Once
	ready chan struct{} // closed once c is set
}

// OnNewClient implements kgo.HookNewClient.
func (*configured) OnNewClient(*kgo.Client) {}

// marks are the configured hooks of one client.
type marks []*configured

// set hands c to every mark: whichever one's adjust the client calls finds
// it.
func (ms marks) set(c *Consumer) {
	wp := weak.Make(c)
	for _, h := range ms {
		h.c.Store(&wp)
		h.once.Do(func() { close(h.ready) })
	}
}

// ConsumerWait is how long a client built with ClientOptions, once
// assigned partitions, waits for NewConsumer to be called on it before it
// reports ErrNoConsumer. kgo joins the group as soon as the client exists,
// so the first assignment may come a moment before the Consumer.
const ConsumerWait = 5 * time.Second

// ErrNoConsumer is what a client built with ClientOptions reports, through
// its polls (wrapped in a kgo.ErrGroupSession, as kgo reports a failed
// group session), when it was assigned partitions and no Consumer was
// built on it within ConsumerWait. Without a Consumer its partitions are
// never fetched: ClientOptions is for a Consumer's client only. kgo then
// joins the group again, and a Consumer built meanwhile takes over. It
// wraps ErrClientConfig.
var ErrNoConsumer = fmt.Errorf("%w: no kafka.Consumer was built on the client within %v of its assignment (kafka.ClientOptions is for a Consumer's client; build a poll loop of your own on a plain client)", ErrClientConfig, ConsumerWait)

// adjust is the client's AdjustFetchOffsetsFn: the consumer's checkpoints,
// if it keeps them, replace the fetched offsets of the partitions just
// assigned. kgo joins the group as soon as the client exists, so the first
// assignment can come before NewConsumer has handed the consumer over: it
// waits for it (or for the session to end), so that no partition starts
// from the group's offset where a stored position should win; but not for
// ever, for a client that never gets one (ErrNoConsumer).
func (h *configured) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	select {
	case <-h.ready:
	default:
		t := time.NewTimer(ConsumerWait)
		defer t.Stop()
		select {
		case <-h.ready:
		case <-t.C:
			return nil, ErrNoConsumer
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c := h.c.Load().Value(); c != nil {
		return c.resume(ctx, offsets)
	}
	return offsets, nil
}

// checkResume verifies that cl's AdjustFetchOffsetsFn is a mark's, so
// that a consumer keeping checkpoints resumes from them.
func (ms marks) checkResume(cl *kgo.Client) error {
	fn, _ := cl.OptValue(kgo.AdjustFetchOffsetsFn).(func(context.Context, map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error))
	// A method value's code pointer is the same for every receiver: it
	// says the function is configured.adjust, and every mark of the
	// client is handed the consumer.
	if fn == nil || reflect.ValueOf(fn).Pointer() != reflect.ValueOf(ms[0].adjust).Pointer() {
		return fmt.Errorf("%w: the client's kgo.AdjustFetchOffsetsFn is not the consumer's (set after kafka.ClientOptions?): HandleCheckpoint resumes from the stored positions through it", ErrClientConfig)
	}
	return nil
}

// The group hooks are set on the client before any Consumer exists, so they
// find their consumer through this registry keyed by client. Both keys and
// values are weak: an abandoned client or consumer is collected, and its
// entry removed by a cleanup.
var registry = struct {
	sync.Mutex
	m map[weak.Pointer[kgo.Client]]weak.Pointer[Consumer]
}{m: make(map[weak.Pointer[kgo.Client]]weak.Pointer[Consumer])}

func register(cl *kgo.Client, c *Consumer) error {
	k := weak.Make(cl)
	registry.Lock()
	defer registry.Unlock()
	if old, ok := registry.m[k]; ok && old.Value() != nil {
		return fmt.Errorf("%w: the client already has a consumer (one Consumer per client)", ErrClientConfig)
	}
	registry.m[k] = weak.Make(c)
	runtime.AddCleanup(c, unregister, k)
	return nil
}

func unregister(k weak.Pointer[kgo.Client]) {
	registry.Lock()
	defer registry.Unlock()
	if v, ok := registry.m[k]; ok && v.Value() == nil {
		delete(registry.m, k)
	}
}

func lookup(cl *kgo.Client) *Consumer {
	registry.Lock()
	defer registry.Unlock()
	return registry.m[weak.Make(cl)].Value()
}

func onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	if c := lookup(cl); c != nil {
		c.revoke(revoked, true)
	}
}

func onLost(ctx context.Context, cl *kgo.Client, lost map[string][]int32) {
	if c := lookup(cl); c != nil {
		c.revoke(lost, false)
	}
}

// checkClient verifies that cl was built with a consumer group and
// ClientOptions, and returns the hooks that mark it (more than one when
// ClientOptions was applied twice).
func checkClient(cl *kgo.Client) (marks, error) {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	if group == "" {
		return nil, fmt.Errorf("%w: no consumer group (kgo.ConsumerGroup)", ErrClientConfig)
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return nil, fmt.Errorf("%w: autocommit is on (build the client with kafka.ClientOptions, which sets kgo.DisableAutoCommit)", ErrClientConfig)
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return nil, fmt.Errorf("%w: kgo.BlockRebalanceOnPoll is not set (build the client with kafka.ClientOptions)", ErrClientConfig)
	}
	hooks, _ := cl.OptValue(kgo.WithHooks).([]kgo.Hook)
	var ms marks
	for _, hk := range hooks {
		if h, ok := hk.(*configured); ok {
			ms = append(ms, h)
		}
	}
	if len(ms) > 0 {
		return ms, nil
	}
	return nil, fmt.Errorf("%w: the client was not built with kafka.ClientOptions (the consumer's rebalance hooks are missing)", ErrClientConfig)
}
