package kafka

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
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
//
// Pass the result to kgo.NewClient together with kgo.ConsumerGroup and
// kgo.ConsumeTopics. Do not set your own OnPartitionsRevoked or
// OnPartitionsLost on that client: NewConsumer rejects a client whose hooks
// are not the consumer's.
func ClientOptions(opts ...kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt(nil), opts...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(onRevoked),
		kgo.OnPartitionsLost(onLost),
		kgo.WithHooks(configured{}),
	)
}

// configured marks a client built with ClientOptions. kgo wraps the
// rebalance hooks it is given, so their identity cannot be checked; this
// hook's can. kgo accepts only hooks that implement one of its interfaces,
// so it implements a no-op OnNewClient.
type configured struct{}

// OnNewClient implements kgo.HookNewClient.
func (configured) OnNewClient(*kgo.Client) {}

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
// ClientOptions, and returns the group.
func checkClient(cl *kgo.Client) (string, error) {
	group, _ := cl.OptValue(kgo.ConsumerGroup).(string)
	if group == "" {
		return "", fmt.Errorf("%w: no consumer group (kgo.ConsumerGroup)", ErrClientConfig)
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return "", fmt.Errorf("%w: autocommit is on (build the client with kafka.ClientOptions, which sets kgo.DisableAutoCommit)", ErrClientConfig)
	}
	if block, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); !block {
		return "", fmt.Errorf("%w: kgo.BlockRebalanceOnPoll is not set (build the client with kafka.ClientOptions)", ErrClientConfig)
	}
	hooks, _ := cl.OptValue(kgo.WithHooks).([]kgo.Hook)
	if !slices.Contains(hooks, kgo.Hook(configured{})) {
		return "", fmt.Errorf("%w: the client was not built with kafka.ClientOptions (the consumer's rebalance hooks are missing)", ErrClientConfig)
	}
	return group, nil
}
