package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/store/memory"
)

// applied counts the handler's effects per key, and the outcomes the
// consumers settled.
type applied struct {
	mu      sync.Mutex
	n       map[string]int
	dups    atomic.Int64
	settled atomic.Int64
}

func newApplied() *applied { return &applied{n: map[string]int{}} }

func (a *applied) apply(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n[id]++
}

func (a *applied) distinct() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.n)
}

// check fails t unless each of want keys was applied exactly once.
func (a *applied) check(t *testing.T, want int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.n) != want {
		t.Fatalf("%d keys applied, want %d", len(a.n), want)
	}
	for id, n := range a.n {
		if n != 1 {
			t.Fatalf("%s applied %d times", id, n)
		}
	}
}

func (a *applied) hook(_ context.Context, _ idem.Message, r broker.Report) {
	a.settled.Add(1)
	if r.Result.Outcome == idem.OutcomeDuplicate {
		a.dups.Add(1)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stream publishes n keyed events spread over the partitions by key.
func stream(t *testing.T, b *suiteBroker, prefix string, n int) {
	t.Helper()
	var msgs []brokertest.Message
	for i := range n {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		msgs = append(msgs, brokertest.Message{ID: id, Payload: []byte(id), OrderKey: fmt.Sprint("k", i%8)})
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestOwnershipMovesMidStream: a second Processor joins while the first
// is mid-stream, the balanced strategy moves partitions to it (the first
// loses them with ErrorCodeOwnershipLost, the second reads them from their
// checkpoints): nothing applied twice, nothing skipped. Then the first
// stops and the second takes everything: again.
func TestOwnershipMovesMidStream(t *testing.T) {
	const n = 600
	b := newSuiteBroker(t)
	g, err := eventhubs.NewGuard(memory.New(), b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eff := newApplied()
	var bySecond atomic.Int64
	consumer := func(second bool) brokertest.Consumer {
		return brokertest.Consumer{
			Guard: g,
			Handle: func(_ context.Context, m idem.Message) ([]byte, error) {
				eff.apply(m.ID)
				if second {
					bySecond.Add(1)
				}
				time.Sleep(5 * time.Millisecond) // mid-stream long enough for partitions to move
				return nil, nil
			},
			Hooks: broker.Hooks[idem.Message]{AfterSettle: eff.hook},
		}
	}
	cps := &steals{CheckpointStore: b.cps}
	b.cps = cps
	stream(t, b, "own", n)
	first, err := b.Start(context.Background(), consumer(false))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first consumer owning every partition", func() bool { return owned(t, cps, b.srv, b.hub) == suitePartitions })
	second, err := b.Start(context.Background(), consumer(true))
	if err != nil {
		t.Fatal(err)
	}
	// The second takes partitions from the first, which is still running.
	waitFor(t, "the second consumer applying", func() bool { return bySecond.Load() >= 10 })
	if cps.n.Load() == 0 {
		t.Fatal("no partition taken from the running consumer")
	}
	if eff.distinct() == n {
		t.Fatal("the stream ended before ownership moved")
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event applied", func() bool { return eff.distinct() == n })
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	eff.check(t, n)
	t.Logf("%d settled, %d by the second consumer, %d duplicates (read again after their partition moved)",
		eff.settled.Load(), bySecond.Load(), eff.dups.Load())
}

// TestProducerResend: a producer sends the same events twice (an
// application retry: new sequence numbers, on other partitions too), and
// one key again with other content: each event is applied once, the
// re-sends settle as duplicates, the reused key is a conflict.
func TestProducerResend(t *testing.T) {
	const n = 50
	b := newSuiteBroker(t)
	g, err := eventhubs.NewGuard(memory.New(), b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eff := newApplied()
	c := brokertest.Consumer{
		Guard:  g,
		Handle: func(_ context.Context, m idem.Message) ([]byte, error) { eff.apply(m.ID); return nil, nil },
		Hooks:  broker.Hooks[idem.Message]{AfterSettle: eff.hook},
	}
	stream(t, b, "re", n)
	var again []brokertest.Message // the re-send, round robin over the partitions
	for i := range n {
		id := fmt.Sprintf("re-%04d", i)
		again = append(again, brokertest.Message{ID: id, Payload: []byte(id)})
	}
	again = append(again, brokertest.Message{ID: "re-0000", Payload: []byte("other content")})
	if err := b.Publish(context.Background(), again...); err != nil {
		t.Fatal(err)
	}
	r, err := b.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event settled", func() bool { return eff.settled.Load() == 2*n+1 })
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	eff.check(t, n)
	if d := eff.dups.Load(); d != n {
		t.Fatalf("%d duplicates, want %d", d, n)
	}
	dls, err := b.DeadLetters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].ID != "re-0000" || dls[0].Reason() != "conflict" {
		t.Fatalf("dead letters %+v, want re-0000's conflict", dls)
	}
}

// TestKilledBetweenEffectAndCheckpoint: a consumer dies after an event's
// effect and before its batch's checkpoint (nothing it does reaches the
// hub or the checkpoint store after that); a consumer started in its
// place reads the partition from the last checkpoint once the dead one's
// ownership expires, and applies nothing twice: what was done settles as
// duplicates.
func TestKilledBetweenEffectAndCheckpoint(t *testing.T) {
	const n = 60
	b := newSuiteBroker(t)
	shared := memory.New()
	victimStore := &killableStore{Store: shared}
	victimGuard, err := eventhubs.NewGuard(victimStore, b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := eventhubs.NewGuard(shared, b.hub, azeventhubs.DefaultConsumerGroup, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eff := newApplied()
	var (
		victim  brokertest.Running
		ready   = make(chan struct{})
		crashed atomic.Bool
	)
	c := brokertest.Consumer{
		Guard:  victimGuard,
		Handle: func(_ context.Context, m idem.Message) ([]byte, error) { eff.apply(m.ID); return nil, nil },
		Hooks: broker.Hooks[idem.Message]{AfterSettle: func(ctx context.Context, m idem.Message, r broker.Report) {
			eff.hook(ctx, m, r)
			if m.ID == "kill-0013" && crashed.CompareAndSwap(false, true) {
				<-ready
				victimStore.dead.Store(true) // it claims nothing more
				victim.Kill()                // the effect is recorded; the batch's checkpoint never comes
			}
		}},
	}
	var msgs []brokertest.Message
	for i := range n {
		id := fmt.Sprintf("kill-%04d", i)
		msgs = append(msgs, brokertest.Message{ID: id, Payload: []byte(id), OrderKey: "one"})
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	victim, err = b.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	waitFor(t, "the crash", crashed.Load)
	c.Guard, c.Hooks.AfterSettle = g, eff.hook
	survivor, err := b.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event applied", func() bool { return eff.distinct() == n })
	if err := survivor.Stop(); err != nil {
		t.Fatal(err)
	}
	eff.check(t, n)
	if eff.dups.Load() == 0 {
		t.Fatal("no event read again after the crash: the checkpoint moved past the effect")
	}
}
