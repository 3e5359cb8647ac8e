package cosmos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/storekit"
)

// InboxOptions configure a BatchInbox.
type InboxOptions struct {
	// PartitionKeyPath is the container's partition key path, one
	// top-level property such as "/orderId" (required). The marker
	// carries the message's partition key value in it.
	PartitionKeyPath string
	// Partition is the partition key value of a message's batch: the
	// value every document the message writes carries in
	// PartitionKeyPath. Default: the key's id (the seed's example: the
	// message id is the order id, and the container is partitioned by
	// /orderId).
	Partition func(idem.Key) string
}

// BatchInbox is the transactional inbox on a Cosmos DB container of
// business documents: idem's dedup marker and the handler's documents go
// in one transactional batch in the message's logical partition, all or
// none, so a redelivery finds the marker (a duplicate, skipped) or finds
// nothing and is processed. Give it to idem.NewInbox; the handler of
// idem.DoTx gets the *Batch to add its documents to:
//
//	inbox, err := cosmos.NewBatchInbox(orders, cosmos.InboxOptions{PartitionKeyPath: "/orderId"})
//	g, err := idem.NewInbox(inbox, idem.Options{Scope: "billing"})
//	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
//		b.CreateItem(orderJSON, nil)   // {"id": "A-1", "orderId": "A-1", ...}
//		b.CreateItem(invoiceJSON, nil) // {"id": "A-1-invoice", "orderId": "A-1", ...}
//		return nil, nil
//	})
//
// The batch is the dedup check, as the seed describes: the marker is the
// batch's first operation, a create, sent without reading first. A batch
// whose marker meets a stored one fails whole with 409 on it; the inbox
// then runs the handler again, now reading the marker first (idem.DoTx's
// deferred marker, storekit.MarkDeferrer), and the stored marker makes the
// delivery a duplicate, or a conflict when its fingerprint differs. A new
// message costs one batch; a duplicate a failed batch, a point read and
// the handler's run that built it (so the handler must write only through
// the batch). Mark (idem.MarkTx) reads the marker first.
//
// The marker is an item of the container: id "idem-" and the hex SHA-256
// of the scope and the key, the partition key value, a ttl (the retention
// in seconds, Cosmos DB removing it when the container has a default time
// to live, -1 for instance), and the record under "idem". Queries over the
// container see markers: filter on IS_DEFINED(c.idem).
//
// BatchInbox keeps a marker per message but no two-phase record (no lease,
// no fencing): it is an idem.TxStore, not an idem.Store.
type BatchInbox struct {
	container *azcosmos.ContainerClient
	field     string
	partition func(idem.Key) string
}

var _ idem.TxStore[*Batch] = (*BatchInbox)(nil)

// NewBatchInbox returns the transactional batch inbox on container.
func NewBatchInbox(container *azcosmos.ContainerClient, opts InboxOptions) (*BatchInbox, error) {
	if container == nil {
		return nil, fmt.Errorf("%w: cosmos: nil container", idem.ErrInvalidOptions)
	}
	field, err := pkField(opts.PartitionKeyPath)
	if err != nil {
		return nil, err
	}
	switch field {
	case "id", "ttl", "idem":
		return nil, fmt.Errorf("%w: cosmos: partition key path %s: the marker's own property (a container partitioned by it cannot hold a marker beside the documents)",
			idem.ErrInvalidOptions, opts.PartitionKeyPath)
	}
	part := opts.Partition
	if part == nil {
		part = func(k idem.Key) string { return k.ID }
	}
	return &BatchInbox{container: container, field: field, partition: part}, nil
}

// pkField is the property a partition key path names: one top-level
// property ("/orderId").
func pkField(path string) (string, error) {
	name, ok := strings.CutPrefix(path, "/")
	if !ok || name == "" || strings.ContainsAny(name, `/"\[]`) {
		return "", fmt.Errorf("%w: cosmos: partition key path %q: want one top-level property, such as /orderId", idem.ErrInvalidOptions, path)
	}
	return name, nil
}

// InTx implements idem.TxStore: it runs fn with a new Batch and, when fn
// returns nil, sends the batch (see Batch). When a marker (or an entity
// write) meets another writer's at the commit, nothing is written and fn
// runs again with a new Batch that reads first; so it does when fn fails
// after its marker was queued unread and the marker turns out stored, so
// that a recorded key is reported as such rather than as fn's failure.
func (x *BatchInbox) InTx(ctx context.Context, fn func(ctx context.Context, b *Batch) error) error {
	return runBatch(ctx, x.container, fn)
}

// maxBatchRuns bounds how often InTx runs fn because keyed writes kept
// meeting other writers' at the commit.
const maxBatchRuns = 16

func runBatch(ctx context.Context, c *azcosmos.ContainerClient, fn func(ctx context.Context, b *Batch) error) error {
	readFirst := false
	for range maxBatchRuns {
		b := &Batch{container: c, readFirst: readFirst}
		if err := fn(ctx, b); err != nil {
			if !readFirst && ctx.Err() == nil && b.hasDeferred() {
				if stored, rerr := b.deferredExists(ctx); rerr == nil && stored {
					readFirst = true
					continue
				}
			}
			return err
		}
		err := b.commit(ctx)
		if !errors.Is(err, errRerun) {
			return err
		}
		readFirst = true
	}
	return fmt.Errorf("cosmos: commit: the batch's keyed writes met other writers' %d times; retry", maxBatchRuns)
}

// Mark implements idem.TxStore: it reads the key's marker in the message's
// partition and decides with storekit.ApplyMark. A new key (or an expired
// marker) queues the marker in b (a create, or a replace conditional on the
// ETag read) and reports ClaimAcquired; a stored marker reports
// ClaimDuplicate with its record, queuing nothing.
func (x *BatchInbox) Mark(ctx context.Context, b *Batch, req idem.ClaimRequest) (idem.Claim, error) {
	req, pk, err := x.prepare(ctx, b, req)
	if err != nil {
		return idem.Claim{}, err
	}
	id := markerID(req.Key)
	var (
		cur  *idem.Record
		etag azcore.ETag
	)
	resp, err := x.container.ReadItem(ctx, azcosmos.NewPartitionKeyString(pk), id, nil)
	switch statusOf(err) {
	case http.StatusNotFound:
	case 0:
		if err != nil {
			return idem.Claim{}, wrap("mark", err)
		}
		var d markerDoc
		if err := json.Unmarshal(resp.Value, &d); err != nil {
			return idem.Claim{}, fmt.Errorf("cosmos: mark: decoding the marker of %s: %w", req.Key, err)
		}
		rec := d.Idem.record()
		cur, etag = &rec, resp.ETag
	default:
		return idem.Claim{}, wrap("mark", err)
	}
	c, write := storekit.ApplyMark(cur, req)
	if !write {
		return c, nil
	}
	c.Record = withMS(c.Record)
	op := x.queue(b, pk, c.Record, req)
	if cur != nil {
		op.ifMatch = &etag
	}
	return c, nil
}

// DeferMark implements storekit.MarkDeferrer: on a Batch's first run it
// queues the marker of a new key as a create, unread, and reports the
// claim of a new key; the commit's 409 on it (the key is recorded) makes
// InTx run the function again, where Mark decides. On a rerun it queues
// nothing and returns false.
func (x *BatchInbox) DeferMark(ctx context.Context, b *Batch, req idem.ClaimRequest) (idem.Claim, bool, error) {
	if b.readFirst || b.Len() > 0 {
		return idem.Claim{}, false, nil
	}
	req, pk, err := x.prepare(ctx, b, req)
	if err != nil {
		return idem.Claim{}, false, err
	}
	c, _ := storekit.ApplyMark(nil, req)
	c.Record = withMS(c.Record)
	x.queue(b, pk, c.Record, req).deferred = true
	return c, true, nil
}

func (x *BatchInbox) prepare(ctx context.Context, b *Batch, req idem.ClaimRequest) (idem.ClaimRequest, string, error) {
	req, err := storekit.PrepareClaim(req)
	if err != nil {
		return req, "", err
	}
	if err := ctx.Err(); err != nil {
		return req, "", err
	}
	if b == nil || b.container == nil {
		return req, "", errors.New("cosmos: mark: not a Batch of the inbox's InTx")
	}
	if err := b.sameContainer(x.container); err != nil {
		return req, "", err
	}
	pk := x.partition(req.Key)
	if err := b.setPartition(pk); err != nil {
		return req, "", err
	}
	for _, k := range b.keyed {
		if k.marker != nil && k.marker.key == req.Key {
			return req, "", &idem.InvalidDataError{Op: "mark", Err: fmt.Errorf("%w: %s marked twice in one batch", idem.ErrDuplicateKeyInBatch, req.Key)}
		}
	}
	return req, pk, nil
}

// marker is a marker queued in a batch; SaveResult adds the result
// before the commit builds its body.
type marker struct {
	key    idem.Key
	field  string
	pk     string
	rec    idem.Record
	now    int64
	result []byte
}

func (x *BatchInbox) queue(b *Batch, pk string, rec idem.Record, req idem.ClaimRequest) *keyedOp {
	m := &marker{key: req.Key, field: x.field, pk: pk, rec: rec, now: req.Now.UnixMilli()}
	op := &keyedOp{id: markerID(req.Key), marker: m, body: m.body}
	b.keyed = append(b.keyed, op)
	return op
}

// body is the marker's document: the record under "idem", the partition
// key value beside the id.
func (m *marker) body() ([]byte, error) {
	r := m.rec
	r.Result = m.result
	d := markerDoc{ID: markerID(m.key), Idem: fieldsOf(r)}
	d.TTL = ttlFor(fromMS(num(m.now)), r.ExpiresAt)
	body, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return withProperty(body, m.field, m.pk)
}

// withProperty adds the property name = value to the JSON object doc.
func withProperty(doc []byte, name string, value any) ([]byte, error) {
	k, err := json.Marshal(name)
	if err != nil {
		return nil, err
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(doc)+len(k)+len(v)+2)
	out = append(out, doc[:len(doc)-1]...)
	if len(doc) > 2 {
		out = append(out, ',')
	}
	out = append(append(append(out, k...), ':'), v...)
	return append(out, '}'), nil
}

// markerID is the item id of key's marker: any key fits Cosmos DB's id
// rules, and no business id starting otherwise collides with it.
func markerID(k idem.Key) string { return "idem-" + addressOf(k).id }

// markerDoc is a marker as the container holds it (beside the partition
// key property, which the inbox's options name): the record under "idem".
type markerDoc struct {
	ID   string `json:"id"`
	TTL  num    `json:"ttl"`
	Idem fields `json:"idem"`
}

// SaveResult implements idem.TxStore: the result goes on key's marker,
// queued in b, before the commit sends it. A result over ResultLimit is
// an *idem.InvalidDataError.
func (x *BatchInbox) SaveResult(_ context.Context, b *Batch, key idem.Key, result []byte) error {
	if len(result) > resultLimit {
		return &idem.InvalidDataError{Op: "save result", Err: &tooLargeError{Size: len(result), Limit: resultLimit}}
	}
	for _, k := range b.keyed {
		if k.marker != nil && k.marker.key == key {
			k.marker.result = result
			return nil
		}
	}
	return fmt.Errorf("cosmos: save result: %w: no marker for %s in this batch", idem.ErrNotFound, key)
}

// Ping implements storekit.Pinger: a read of the container's properties.
// When a handler fails, idem.DoTx pings: an account that does not answer
// makes the failure a store outage (the message held) rather than the
// handler's.
func (x *BatchInbox) Ping(ctx context.Context) error { return ping(ctx, x.container) }

func ping(ctx context.Context, c *azcosmos.ContainerClient) error {
	_, err := c.Read(ctx, nil)
	return wrap("ping", err)
}
