package cosmos

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
)

// MaxBatchOperations is Cosmos DB's limit on the operations of one
// transactional batch, the dedup marker included.
const MaxBatchOperations = 100

// Batch is the transaction of a BatchInbox or an EntityInbox: the
// transactional batch of one logical partition that the inbox sends when
// the handler returns nil, all of it or none. The handler adds its
// documents with CreateItem, UpsertItem, ReplaceItem, DeleteItem and
// PatchItem (as on an azcosmos.TransactionalBatch) and with
// Entities.Insert and Versioned.Apply; nothing is sent before the commit.
//
// The batch's partition is the message's (BatchInbox's marker sets it,
// InboxOptions.Partition) or the key of its first entity write: every
// document added must carry that partition key value. The commit sends the
// marker and the entity writes first, then the handler's other operations
// in the order added, at most MaxBatchOperations in all.
//
// A Batch belongs to one run of the handler; it is not safe for
// concurrent use.
type Batch struct {
	container *azcosmos.ContainerClient
	// readFirst is set on a rerun: keyed writes read what is stored before
	// they queue anything, so that the run decides from it.
	readFirst bool
	pk        string
	pkSet     bool
	keyed     []*keyedOp
	ops       []plainOp
	err       error // the first misuse, returned by the commit
}

// keyedOp is a write whose failure at the commit (409 on a create, 412 or
// 404 on a conditional replace) means another writer came first: the
// inbox then runs the handler again, reading first.
type keyedOp struct {
	id      string
	body    func() ([]byte, error)
	ifMatch *azcore.ETag // a replace when set, a create otherwise
	// deferred: queued without reading the stored item (the first run's
	// marker and entity inserts).
	deferred bool
	marker   *marker // the dedup marker, when it is one
}

func (k *keyedOp) name() string {
	if k.ifMatch != nil {
		return "Replace"
	}
	return "Create"
}

// plainOp is an operation of the handler's own.
type plainOp struct {
	name  string
	apply func(*azcosmos.TransactionalBatch)
}

func (b *Batch) add(name string, apply func(*azcosmos.TransactionalBatch)) {
	b.ops = append(b.ops, plainOp{name: name, apply: apply})
}

// CreateItem adds the creation of item (a JSON document carrying the
// batch's partition key value) to the batch.
func (b *Batch) CreateItem(item []byte, o *azcosmos.TransactionalBatchItemOptions) {
	b.add("Create", func(tb *azcosmos.TransactionalBatch) { tb.CreateItem(item, o) })
}

// UpsertItem adds an upsert of item to the batch.
func (b *Batch) UpsertItem(item []byte, o *azcosmos.TransactionalBatchItemOptions) {
	b.add("Upsert", func(tb *azcosmos.TransactionalBatch) { tb.UpsertItem(item, o) })
}

// ReplaceItem adds the replacement of the item with id itemID to the batch
// (conditional on o.IfMatchETag when set).
func (b *Batch) ReplaceItem(itemID string, item []byte, o *azcosmos.TransactionalBatchItemOptions) {
	b.add("Replace", func(tb *azcosmos.TransactionalBatch) { tb.ReplaceItem(itemID, item, o) })
}

// DeleteItem adds the deletion of the item with id itemID to the batch.
func (b *Batch) DeleteItem(itemID string, o *azcosmos.TransactionalBatchItemOptions) {
	b.add("Delete", func(tb *azcosmos.TransactionalBatch) { tb.DeleteItem(itemID, o) })
}

// PatchItem adds a patch of the item with id itemID to the batch.
func (b *Batch) PatchItem(itemID string, p azcosmos.PatchOperations, o *azcosmos.TransactionalBatchItemOptions) {
	b.add("Patch", func(tb *azcosmos.TransactionalBatch) { tb.PatchItem(itemID, p, o) })
}

// Partition returns the batch's partition key value, and false while no
// marker or entity write has set it.
func (b *Batch) Partition() (string, bool) { return b.pk, b.pkSet }

// Len is the number of operations the commit will send.
func (b *Batch) Len() int { return len(b.keyed) + len(b.ops) }

// setPartition fixes the batch's logical partition; a second, different
// value is refused: a transactional batch is one partition.
func (b *Batch) setPartition(pk string) error {
	if b.pkSet && b.pk != pk {
		return &idem.InvalidDataError{Op: "batch", Err: fmt.Errorf(
			"cosmos: a write in partition %q added to a batch of partition %q (a transactional batch is one logical partition)", pk, b.pk)}
	}
	b.pk, b.pkSet = pk, true
	return nil
}

// sameContainer refuses a write of another container's documents.
func (b *Batch) sameContainer(c *azcosmos.ContainerClient) error {
	if c != nil && c.ID() != b.container.ID() {
		return &idem.InvalidDataError{Op: "batch", Err: fmt.Errorf(
			"cosmos: a write to container %s added to a batch of container %s", c.ID(), b.container.ID())}
	}
	return nil
}

// hasDeferred reports whether a keyed write was queued without a read.
func (b *Batch) hasDeferred() bool {
	for _, k := range b.keyed {
		if k.deferred {
			return true
		}
	}
	return false
}

// deferredExists reads the items of the deferred keyed writes: true when
// one is stored, and a run that read first would have decided otherwise.
func (b *Batch) deferredExists(ctx context.Context) (bool, error) {
	for _, k := range b.keyed {
		if !k.deferred {
			continue
		}
		_, err := b.container.ReadItem(ctx, azcosmos.NewPartitionKeyString(b.pk), k.id, nil)
		switch statusOf(err) {
		case 0:
			if err != nil {
				return false, err
			}
			return true, nil
		case http.StatusNotFound:
			continue
		}
		return false, err
	}
	return false, nil
}

// errRerun reports a keyed write that met another writer's at the commit.
var errRerun = errors.New("cosmos: a keyed write lost a race")

// commit sends the batch. It returns errRerun when a keyed write failed
// because another writer came first (nothing was written), a *BatchError
// (an *idem.InvalidDataError when retrying cannot help) when another
// operation failed, nil when every operation went in.
func (b *Batch) commit(ctx context.Context) error {
	if b.err != nil {
		return b.err
	}
	n := b.Len()
	if n == 0 {
		return nil
	}
	if !b.pkSet {
		return idem.Permanent(errors.New("cosmos: the batch has operations but no partition: a BatchInbox's marker or an entity write sets it (Entities.Insert, Versioned.Apply)"))
	}
	if n > MaxBatchOperations {
		return &idem.InvalidDataError{Op: "commit", Err: fmt.Errorf("cosmos: a transactional batch of %d operations (at most %d, the marker included)", n, MaxBatchOperations)}
	}
	tb := b.container.NewTransactionalBatch(azcosmos.NewPartitionKeyString(b.pk))
	names := make([]string, 0, n)
	for _, k := range b.keyed {
		body, err := k.body()
		if err != nil {
			return err
		}
		if k.ifMatch != nil {
			tb.ReplaceItem(k.id, body, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: k.ifMatch})
		} else {
			tb.CreateItem(body, nil)
		}
		names = append(names, k.name())
	}
	for _, op := range b.ops {
		op.apply(&tb)
		names = append(names, op.name)
	}
	resp, err := b.container.ExecuteTransactionalBatch(ctx, tb, nil)
	if err != nil {
		return wrap("commit", err)
	}
	if resp.Success {
		return nil
	}
	i, status := failedOp(resp.OperationResults)
	if i < len(b.keyed) {
		switch {
		case status == http.StatusConflict && b.keyed[i].ifMatch == nil,
			status == http.StatusPreconditionFailed, status == http.StatusNotFound:
			return errRerun
		}
	}
	be := &BatchError{Index: i, Operations: n, Status: status}
	if i >= 0 && i < len(names) {
		be.Op = names[i]
	}
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusConflict:
		// A 409 on a create of the handler's own: the document exists from
		// something else than this message (whose earlier commit would
		// have left its marker, found first), so a redelivery would meet
		// it again.
		return &idem.InvalidDataError{Op: "commit", Err: be}
	}
	return be
}

// failedOp is the operation that failed a batch: the first whose status is
// not 424 (failed dependency).
func failedOp(rs []azcosmos.TransactionalBatchResult) (int, int) {
	for i, r := range rs {
		if r.StatusCode != http.StatusFailedDependency {
			return i, int(r.StatusCode)
		}
	}
	return -1, 0
}

// BatchError is a transactional batch the server refused, nothing written:
// the operation at Index (in the order sent: the marker and the entity
// writes first, then the handler's in the order added) failed with Status.
// A refusal that retrying cannot change (400, 413, 409 on a create of the
// handler's) comes wrapped in an *idem.InvalidDataError, permanent; others
// (412 or 404 on the handler's conditional writes, 429) are retryable.
type BatchError struct {
	Index      int    // the failed operation's position, -1 when none said
	Op         string // Create, Replace, Upsert, Delete or Patch
	Operations int    // how many the batch had
	Status     int    // its HTTP status
}

// Error names the failed operation and its status.
func (e *BatchError) Error() string {
	return fmt.Sprintf("cosmos: transactional batch of %d operations refused: operation %d (%s) failed with %d %s; nothing was written",
		e.Operations, e.Index, e.Op, e.Status, http.StatusText(e.Status))
}
