package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem"

	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
)

// steals counts the claims of partitions another Processor owned (not
// given up) on a shared CheckpointStore.
type steals struct {
	azeventhubs.CheckpointStore
	n atomic.Int64
}

func (s *steals) ClaimOwnership(ctx context.Context, want []azeventhubs.Ownership, opts *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if len(want) == 0 {
		return nil, nil
	}
	w := want[0]
	before, err := s.ListOwnership(ctx, w.FullyQualifiedNamespace, w.EventHubName, w.ConsumerGroup, nil)
	if err != nil {
		return nil, err
	}
	got, err := s.CheckpointStore.ClaimOwnership(ctx, want, opts)
	for _, o := range got {
		for _, b := range before {
			if b.PartitionID == o.PartitionID && b.OwnerID != "" && b.OwnerID != o.OwnerID {
				s.n.Add(1)
			}
		}
	}
	return got, err
}

// owned is how many of hub's partitions are owned (not given up).
func owned(t testing.TB, cps azeventhubs.CheckpointStore, srv *eventhubstest.Server, hub string) int {
	own, err := cps.ListOwnership(context.Background(), srv.Addr(), hub, azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range own {
		if o.OwnerID != "" {
			n++
		}
	}
	return n
}

// errDead is what a killed consumer's checkpoint store answers.
var errDead = errors.New("the consumer was killed by the test")

// killable is one consumer's view of a shared CheckpointStore: once
// killed, it refuses everything, as a crashed process writes nothing.
type killable struct {
	azeventhubs.CheckpointStore
	dead atomic.Bool
}

func (k *killable) ClaimOwnership(ctx context.Context, o []azeventhubs.Ownership, opts *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	if k.dead.Load() {
		return nil, errDead
	}
	return k.CheckpointStore.ClaimOwnership(ctx, o, opts)
}

func (k *killable) SetCheckpoint(ctx context.Context, c azeventhubs.Checkpoint, opts *azeventhubs.SetCheckpointOptions) error {
	if k.dead.Load() {
		return errDead
	}
	return k.CheckpointStore.SetCheckpoint(ctx, c, opts)
}

// killableStore is one consumer's view of a shared idem.Store: once
// killed, it refuses every write, as a crashed process claims and
// completes nothing. (The test's Kill cannot stop a consumer's goroutines
// at once; without this, the one that was killed goes on with the events
// it already received.)
type killableStore struct {
	idem.Store
	dead atomic.Bool
}

func (k *killableStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if k.dead.Load() {
		return idem.Claim{}, errDead
	}
	return k.Store.Claim(ctx, req)
}

func (k *killableStore) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Complete(ctx, req)
}

func (k *killableStore) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Release(ctx, req)
}

func (k *killableStore) Renew(ctx context.Context, req idem.RenewRequest) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Renew(ctx, req)
}

// Processor timings of the tests: a killed consumer's partitions expire,
// and the survivors claim them, within a few seconds.
const (
	updateInterval = 200 * time.Millisecond
	expiration     = 2 * time.Second
)

// newProcessor is a Processor of hub's $Default group on a client (a
// connection) of its own, on cps, starting where there is no checkpoint
// at the earliest event.
func newProcessor(t testing.TB, srv *eventhubstest.Server, hub string, cps azeventhubs.CheckpointStore) (*azeventhubs.Processor, *azeventhubs.ConsumerClient) {
	t.Helper()
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(srv.ConnectionString(), hub, azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	p, err := azeventhubs.NewProcessor(cc, cps, &azeventhubs.ProcessorOptions{
		StartPositions:              azeventhubs.StartPositions{Default: azeventhubs.StartPosition{Earliest: &yes}},
		UpdateInterval:              updateInterval,
		PartitionExpirationDuration: expiration,
	})
	if err != nil {
		cc.Close(context.Background())
		t.Fatal(err)
	}
	return p, cc
}

func newProducer(t testing.TB, srv *eventhubstest.Server, hub string) *azeventhubs.ProducerClient {
	t.Helper()
	p, err := azeventhubs.NewProducerClientFromConnectionString(srv.ConnectionString(), hub, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// readAll reads every event of hub's partitions from the earliest.
func readAll(ctx context.Context, srv *eventhubstest.Server, hub string) ([]*azeventhubs.ReceivedEventData, error) {
	cc, err := azeventhubs.NewConsumerClientFromConnectionString(srv.ConnectionString(), hub, azeventhubs.DefaultConsumerGroup, nil)
	if err != nil {
		return nil, err
	}
	defer cc.Close(ctx)
	props, err := cc.GetEventHubProperties(ctx, nil)
	if err != nil {
		return nil, err
	}
	var out []*azeventhubs.ReceivedEventData
	for _, id := range props.PartitionIDs {
		n, err := srv.Count(hub, id)
		if err != nil || n == 0 {
			continue
		}
		yes := true
		pc, err := cc.NewPartitionClient(id, &azeventhubs.PartitionClientOptions{StartPosition: azeventhubs.StartPosition{Earliest: &yes}})
		if err != nil {
			return nil, err
		}
		var got []*azeventhubs.ReceivedEventData
		for len(got) < n {
			evs, err := pc.ReceiveEvents(ctx, n-len(got), nil)
			if err != nil {
				pc.Close(ctx)
				return nil, err
			}
			got = append(got, evs...)
		}
		pc.Close(ctx)
		out = append(out, got...)
	}
	return out, nil
}
