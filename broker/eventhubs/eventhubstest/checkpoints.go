package eventhubstest

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
)

// CheckpointStore is an in-memory azeventhubs.CheckpointStore for tests,
// shared by the Processors of a test as a blob container would be:
// ownership claimed on the stored ETag (nil for a partition never owned),
// checkpoints set as given. Its methods are safe for concurrent use.
type CheckpointStore struct {
	mu     sync.Mutex
	owners map[string]azeventhubs.Ownership  // by namespace/hub/group/partition
	marks  map[string]azeventhubs.Checkpoint // by namespace/hub/group/partition
	n      int
}

var _ azeventhubs.CheckpointStore = (*CheckpointStore)(nil)

// NewCheckpointStore returns an empty store.
func NewCheckpointStore() *CheckpointStore {
	return &CheckpointStore{owners: map[string]azeventhubs.Ownership{}, marks: map[string]azeventhubs.Checkpoint{}}
}

func storeKey(ns, hub, group, partition string) string {
	return ns + "/" + hub + "/" + group + "/" + partition
}

// ClaimOwnership claims each ownership whose ETag is the stored one.
func (s *CheckpointStore) ClaimOwnership(_ context.Context, want []azeventhubs.Ownership, _ *azeventhubs.ClaimOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []azeventhubs.Ownership
	for _, o := range want {
		k := storeKey(o.FullyQualifiedNamespace, o.EventHubName, o.ConsumerGroup, o.PartitionID)
		cur, ok := s.owners[k]
		if ok && (o.ETag == nil || cur.ETag == nil || *o.ETag != *cur.ETag) || !ok && o.ETag != nil {
			continue
		}
		s.n++
		tag := azcore.ETag(strconv.Itoa(s.n))
		o.ETag, o.LastModifiedTime = &tag, time.Now().UTC()
		s.owners[k] = o
		got = append(got, o)
	}
	return got, nil
}

// ListCheckpoints lists the checkpoints of a hub's consumer group.
func (s *CheckpointStore) ListCheckpoints(_ context.Context, ns, hub, group string, _ *azeventhubs.ListCheckpointsOptions) ([]azeventhubs.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []azeventhubs.Checkpoint
	for _, c := range s.marks {
		if c.FullyQualifiedNamespace == ns && c.EventHubName == hub && c.ConsumerGroup == group {
			out = append(out, c)
		}
	}
	return out, nil
}

// ListOwnership lists the ownerships of a hub's consumer group.
func (s *CheckpointStore) ListOwnership(_ context.Context, ns, hub, group string, _ *azeventhubs.ListOwnershipOptions) ([]azeventhubs.Ownership, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []azeventhubs.Ownership
	for _, o := range s.owners {
		if o.FullyQualifiedNamespace == ns && o.EventHubName == hub && o.ConsumerGroup == group {
			out = append(out, o)
		}
	}
	return out, nil
}

// SetCheckpoint sets c.
func (s *CheckpointStore) SetCheckpoint(_ context.Context, c azeventhubs.Checkpoint, _ *azeventhubs.SetCheckpointOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[storeKey(c.FullyQualifiedNamespace, c.EventHubName, c.ConsumerGroup, c.PartitionID)] = c
	return nil
}
