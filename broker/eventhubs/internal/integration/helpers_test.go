package integration_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"

	"github.com/idemgo/idem/broker/eventhubs/eventhubstest"
)

// memCheckpoints is an in-memory azeventhubs.CheckpointStore, shared by
// the Processors of a test as a blob container would be.
type memCheckpoints struct {
	mu     sync.Mutex
	owners map[string]azeventhubs.Ownership
	marks  map[string]azeventhubs.Checkpoint
	n      int
	steals int // claims of a partition another Processor owned (not given up)
}

func newMemCheckpoints() *memCheckpoints {
	return &memCheckpoints{owners: map[string]azeventhubs.Ownership{}, marks: map[string]azeventhubs.Checkpoint{}}
}

func (s *memCheckpoints) ClaimOwnership(_ context.Context, want []azeventhubs.Ownership, _ *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []azeventhubs.Ownership
	for _, o := range want {
		cur, ok := s.owners[o.PartitionID]
		if ok && (o.ETag == nil || cur.ETag == nil || *o.ETag != *cur.ETag) {
			continue
		}
		if ok && cur.OwnerID != "" && cur.OwnerID != o.OwnerID {
			s.steals++
		}
		s.n++
		tag := azcore.ETag(strconv.Itoa(s.n))
		o.ETag, o.LastModifiedTime = &tag, time.Now().UTC()
		s.owners[o.PartitionID] = o
		got = append(got, o)
	}
	return got, nil
}

func (s *memCheckpoints) ListCheckpoints(context.Context, string, string, string, *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []azeventhubs.Checkpoint
	for _, c := range s.marks {
		out = append(out, c)
	}
	return out, nil
}

func (s *memCheckpoints) ListOwnership(context.Context, string, string, string, *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []azeventhubs.Ownership
	for _, o := range s.owners {
		out = append(out, o)
	}
	return out, nil
}

// owned is how many partitions are owned (not given up).
func (s *memCheckpoints) owned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.owners {
		if o.OwnerID != "" {
			n++
		}
	}
	return n
}

func (s *memCheckpoints) stolen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steals
}

func (s *memCheckpoints) SetCheckpoint(_ context.Context, c azeventhubs.Checkpoint, _ *azeventhubs.SetCheckpointOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[c.PartitionID] = c
	return nil
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
