package cosmostest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// statuses are the operations' status codes of a batch's answer.
func statuses(r azcosmos.TransactionalBatchResponse) []int32 {
	out := make([]int32, len(r.OperationResults))
	for i, o := range r.OperationResults {
		out[i] = o.StatusCode
	}
	return out
}

// A transactional batch: the operations of one logical partition applied
// in order, all or none, each with its status; on a failure, 207 with
// that operation's status and 424 for the others, nothing written.
func TestTransactionalBatch(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	item := func(id, part string) []byte { return doc(t, map[string]any{"id": id, "pk": part, "v": id}) }

	b := cc.NewTransactionalBatch(pk("a"))
	for i := range 3 {
		b.CreateItem(item(fmt.Sprintf("a%d", i), "a"), nil)
	}
	r, err := cc.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil || !r.Success || fmt.Sprint(statuses(r)) != "[201 201 201]" {
		t.Fatalf("a batch of creates: %v, %v, %v", r.Success, statuses(r), err)
	}
	for _, o := range r.OperationResults {
		if o.ETag == "" || o.RequestCharge <= 0 || o.ResourceBody != nil {
			t.Fatalf("a create's result without content on write: %+v", o)
		}
	}

	cur, err := cc.ReadItem(ctx, pk("a"), "a2", nil)
	if err != nil {
		t.Fatal(err)
	}
	var p azcosmos.PatchOperations
	p.AppendSet("/v", "patched")
	b = cc.NewTransactionalBatch(pk("a"))
	b.CreateItem(item("a3", "a"), nil)
	b.ReadItem("a0", nil)
	b.DeleteItem("a1", nil)
	b.UpsertItem(item("a1", "a"), nil)
	b.ReplaceItem("a2", item("a2", "a"), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &cur.ETag})
	b.PatchItem("a3", p, nil)
	r, err = cc.ExecuteTransactionalBatch(ctx, b, &azcosmos.TransactionalBatchOptions{EnableContentResponseOnWrite: true})
	if err != nil || !r.Success || fmt.Sprint(statuses(r)) != "[201 200 204 201 200 200]" {
		t.Fatalf("a mixed batch: %v, %v, %v", r.Success, statuses(r), err)
	}
	if m := decode(t, r.OperationResults[5].ResourceBody); m["v"] != "patched" {
		t.Fatalf("the patch's result body = %v", m)
	}
	if m := decode(t, r.OperationResults[1].ResourceBody); m["id"] != "a0" {
		t.Fatalf("the read's result body = %v", m)
	}

	stale := cur.ETag
	for _, tc := range []struct {
		name  string
		build func(*azcosmos.TransactionalBatch)
		want  string
	}{
		{"a create of an existing id", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(item("new", "a"), nil)
			b.CreateItem(item("a0", "a"), nil)
		}, "[424 409]"},
		{"an item of another partition", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(item("new", "a"), nil)
			b.CreateItem(item("other", "b"), nil)
		}, "[424 400]"},
		{"a replace with a stale ETag", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(item("new", "a"), nil)
			b.ReplaceItem("a2", item("a2", "a"), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &stale})
			b.DeleteItem("a0", nil)
		}, "[424 412 424]"},
		{"a read of a missing id", func(b *azcosmos.TransactionalBatch) {
			b.CreateItem(item("new", "a"), nil)
			b.ReadItem("nope", nil)
		}, "[424 404]"},
		{"a create after a delete of the id, then a conflict", func(b *azcosmos.TransactionalBatch) {
			b.DeleteItem("a0", nil)
			b.CreateItem(item("a0", "a"), nil)
			b.CreateItem(item("a1", "a"), nil)
		}, "[424 424 409]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := cc.NewTransactionalBatch(pk("a"))
			tc.build(&b)
			r, err := cc.ExecuteTransactionalBatch(ctx, b, nil)
			if err != nil || r.Success || r.RawResponse.StatusCode != http.StatusMultiStatus || fmt.Sprint(statuses(r)) != tc.want {
				t.Fatalf("%v, %v (%d), %v; want 207 with %s", r.Success, statuses(r), r.RawResponse.StatusCode, err, tc.want)
			}
			if _, err := cc.ReadItem(ctx, pk("a"), "new", nil); status(err) != http.StatusNotFound {
				t.Fatalf("the failed batch's create was written: %v", err)
			}
			if _, err := cc.ReadItem(ctx, pk("a"), "a0", nil); err != nil {
				t.Fatalf("the failed batch's delete was applied: %v", err)
			}
		})
	}

	b = cc.NewTransactionalBatch(pk("a"))
	for i := range 101 {
		b.ReadItem(fmt.Sprintf("a%d", i), nil)
	}
	_, err = cc.ExecuteTransactionalBatch(ctx, b, nil)
	wantStatus(t, "a batch of 101 operations", err, http.StatusBadRequest, "1 to 100")
	etag := azcore.ETag(`"x"`)
	b = cc.NewTransactionalBatch(pk("a"))
	b.UpsertItem(item("a0", "a"), &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &etag})
	_, err = cc.ExecuteTransactionalBatch(ctx, b, nil)
	wantStatus(t, "If-Match on a batch's upsert", err, http.StatusBadRequest, "does not model")
}
