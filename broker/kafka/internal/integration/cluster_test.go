package integration_test

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/broker/brokertest"
)

// TestClusterLeadershipMoves runs brokertest's effectively-once cases on a
// kfake cluster of three brokers whose partition leadership moves all
// through the run: every twenty-fifth of the messages settled, one
// partition of the topic or of the dead-letter topic gets a new leader (its
// epoch bumped: the old leader answers NOT_LEADER_FOR_PARTITION to fetches
// and produces, and the clients must find the new one), and every fifth
// move the group coordinators are rehashed as well (commits and heartbeats
// answered NOT_COORDINATOR). Meanwhile a further consumer joins the group
// once a fifth of the messages are settled and leaves it, with a graceful
// stop, at half: two rebalances during the moves. The cases must
// still hold: every unique message applied once, every reused id
// dead-lettered once as a conflict, nothing lost. After each case the test
// checks that the moves happened and that both rebalances completed (the
// group's generation grew on each).
//
// The cluster advertises OffsetForLeaderEpoch only up to v1, so the
// clients do not validate their positions against leader epochs
// (KIP-320): kfake answers a position's epoch with UNDEFINED_EPOCH_OFFSET
// once the partition's leader has moved without a write since, where a
// broker would answer its log end, and kgo then resets the partition to
// ConsumeResetOffset (here its start) and reads it all again, about eight
// times per case. The guard holds through that too (in the runs made that
// way no unique message was applied twice), but every conflict read again
// is dead-lettered again, as after any redelivery, which the suite's count
// of dead letters does not allow.
//
//	go test -run TestClusterLeadershipMoves ./broker/kafka/internal/integration/
func TestClusterLeadershipMoves(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Broker {
		if !clusterCases[path.Base(t.Name())] {
			t.Skip("TestConformance runs it on one broker; the cluster runs the effectively-once cases through leadership moves")
		}
		return newMovingBroker(t)
	})
}

// clusterCases are the brokertest cases run on the cluster.
var clusterCases = map[string]bool{"EffectivelyOnce": true, "EffectivelyOnceTx": true}

const (
	clusterBrokers = 3
	// movesPerRun is how many moves a case makes, spread over the
	// settles of the messages it published.
	movesPerRun = 25
	// groupWait bounds the wait for the group to settle after the join
	// and after the leave: a deadline for a stuck group, not a measurement.
	groupWait = 30 * time.Second
)

// movingBroker is suiteBroker on a cluster of clusterBrokers brokers,
// moving leaders and rebalancing the group while the suite runs.
type movingBroker struct {
	*suiteBroker

	published, settled atomic.Int64
	starts             atomic.Int64 // the suite's consumers
	moves              atomic.Int64
	moveEvery          atomic.Int64   // settles between moves, set by Publish
	joinAt, leaveAt    atomic.Int64   // settle counts, set by Publish
	bg                 sync.WaitGroup // the join and the leave

	mu       sync.Mutex
	sc       *brokertest.Consumer // the first consumer, as started: the joiner runs the same
	joined   chan struct{}        // closed once the join is done
	joiner   brokertest.Running
	joinerID string  // its member id, once in the group
	epochs   []int32 // the group's generation before the join, after it, after the leave
	errs     []error
}

func newMovingBroker(t *testing.T) *movingBroker {
	versions := kversion.Tip()
	versions.SetMaxKeyVersion(int16(kmsg.OffsetForLeaderEpoch), 1) // see TestClusterLeadershipMoves
	b := &movingBroker{suiteBroker: newSuiteBrokerWith(t,
		[]kfake.Opt{kfake.NumBrokers(clusterBrokers), kfake.MaxVersions(versions)},
		// A client told its partition's leader moved finds the new one
		// at once, not after kgo's default of five seconds.
		kgo.MetadataMinAge(50*time.Millisecond),
		// A rebalance the suite's consumers are killed in the middle of
		// (the case may end during the leave's) completes without them in
		// seconds, not after kgo's default of a minute.
		kgo.RebalanceTimeout(3*time.Second)),
		joined: make(chan struct{})}
	t.Cleanup(b.check) // before the suite broker's cleanup closes the cluster
	return b
}

// Publish sets when leaders move and when the joiner joins and leaves.
func (b *movingBroker) Publish(ctx context.Context, msgs ...brokertest.Message) error {
	b.published.Add(int64(len(msgs)))
	b.moveEvery.CompareAndSwap(0, max(1, int64(len(msgs)/movesPerRun)))
	b.joinAt.CompareAndSwap(0, int64(len(msgs)/5))
	b.leaveAt.CompareAndSwap(0, int64(len(msgs)/2))
	return b.suiteBroker.Publish(ctx, msgs...)
}

// DeadLetters is suiteBroker's, retried for groupWait: a request may
// reach a partition's old leader.
func (b *movingBroker) DeadLetters(ctx context.Context) ([]brokertest.DeadLetter, error) {
	deadline := time.Now().Add(groupWait)
	for {
		dls, err := b.suiteBroker.DeadLetters(ctx)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return dls, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start counts the settled messages, to move leaders, join and leave on
// the way.
func (b *movingBroker) Start(ctx context.Context, sc brokertest.Consumer) (brokertest.Running, error) {
	next := sc.Hooks.AfterSettle
	sc.Hooks.AfterSettle = func(ctx context.Context, m idem.Message, r broker.Report) {
		n := b.settled.Add(1)
		if every := b.moveEvery.Load(); every > 0 && n%every == 0 && n <= b.published.Load() {
			b.move() // here, so that the run goes on under the new leader
		}
		switch n {
		case b.joinAt.Load():
			b.bg.Add(1)
			go b.join()
		case b.leaveAt.Load():
			b.bg.Add(1)
			go b.leave()
		}
		if next != nil {
			next(ctx, m, r)
		}
	}
	b.mu.Lock()
	if b.sc == nil {
		b.sc = &sc
	}
	b.mu.Unlock()
	b.starts.Add(1)
	return b.suiteBroker.Start(ctx, sc)
}

// move gives the next partition, going round the topic's partitions and
// the dead-letter topic's, a new leader, and rehashes the coordinators
// every fifth time.
func (b *movingBroker) move() {
	n := b.moves.Add(1) - 1
	topic, p := b.topic, int32(n%(suitePartitions+1))
	if p == suitePartitions {
		topic, p = b.dlq, 0
	}
	to := (b.c.LeaderFor(topic, p) + 1) % clusterBrokers
	if err := b.c.MoveTopicPartition(topic, p, to); err != nil {
		b.fail(fmt.Errorf("move %s/%d to broker %d: %w", topic, p, to, err))
	}
	if n%5 == 4 {
		b.c.RehashCoordinators()
	}
}

// join starts the joiner and waits for the group to take it in: a stable
// generation later than before with the joiner among its members.
func (b *movingBroker) join() {
	defer b.bg.Done()
	defer close(b.joined)
	b.mu.Lock()
	sc := *b.sc
	b.mu.Unlock()
	before := b.c.GroupInfo(b.group).Epoch
	r, err := b.suiteBroker.Start(context.Background(), sc)
	if err != nil {
		b.fail(fmt.Errorf("joiner: %w", err))
		return
	}
	b.mu.Lock()
	b.joiner = r
	b.mu.Unlock()
	cl := r.(*suiteConsumer).cl
	g, err := b.waitGroup(func(g *kfake.GroupInfo) bool {
		id, _ := cl.GroupMetadata()
		return g != nil && g.State == "Stable" && g.Epoch > before && slices.ContainsFunc(g.Members, func(m kfake.GroupMember) bool { return m.MemberID == id })
	})
	if err != nil {
		b.fail(fmt.Errorf("the join: %w", err))
		return
	}
	id, _ := cl.GroupMetadata()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.joinerID = id
	b.epochs = append(b.epochs, before, g.Epoch)
}

// leave stops the joiner gracefully and waits for a later generation
// without it.
func (b *movingBroker) leave() {
	defer b.bg.Done()
	<-b.joined
	b.mu.Lock()
	r, id := b.joiner, b.joinerID
	b.joiner = nil
	joined := int32(0)
	if len(b.epochs) > 0 {
		joined = b.epochs[len(b.epochs)-1]
	}
	b.mu.Unlock()
	if r == nil {
		return // the join failed, and said so
	}
	if err := r.Stop(); err != nil {
		b.fail(fmt.Errorf("joiner's stop: %w", err))
	}
	if id == "" {
		return // it never got in: the join said so
	}
	g, err := b.waitGroup(func(g *kfake.GroupInfo) bool {
		return g != nil && g.Epoch > joined && !slices.ContainsFunc(g.Members, func(m kfake.GroupMember) bool { return m.MemberID == id })
	})
	if err != nil {
		b.fail(fmt.Errorf("the leave: %w", err))
		return
	}
	b.mu.Lock()
	b.epochs = append(b.epochs, g.Epoch)
	b.mu.Unlock()
}

// waitGroup waits up to groupWait for the group to satisfy fn.
func (b *movingBroker) waitGroup(fn func(*kfake.GroupInfo) bool) (*kfake.GroupInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), groupWait)
	defer cancel()
	g, err := b.c.WaitGroupInfo(ctx, b.group, fn)
	if err != nil {
		return nil, fmt.Errorf("group %+v not as wanted within %v: %w", g, groupWait, err)
	}
	return g, nil
}

func (b *movingBroker) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, err)
}

// check, after the case, waits for the join and the leave (stops the
// joiner if the case ended first), then checks that leadership moved and
// that the join and the leave each made a new generation.
func (b *movingBroker) check() {
	t := b.t
	b.bg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.joiner != nil {
		t.Errorf("the joiner never left (settled %d, leave due at %d)", b.settled.Load(), b.leaveAt.Load())
		b.joiner.Kill()
	}
	for _, err := range b.errs {
		t.Error(err)
	}
	t.Logf("%d settles of %d messages, %d leadership moves, group generations %v (before the join, after it, after the leave)",
		b.settled.Load(), b.published.Load(), b.moves.Load(), b.epochs)
	if n := b.moves.Load(); n < movesPerRun {
		t.Errorf("%d leadership moves, want %d", n, movesPerRun)
	}
	if len(b.epochs) != 3 || !(b.epochs[0] < b.epochs[1] && b.epochs[1] < b.epochs[2]) {
		t.Errorf("group generations %v, want three growing ones (before the join, after it, after the leave)", b.epochs)
	}
}
