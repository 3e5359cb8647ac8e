package cosmostest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// Create (201, then 409), read (200, 404), replace and delete conditional
// on the ETag (412 on a stale one), upsert (201 new, 200 existing).
func TestItemLifecycle(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	order := doc(t, map[string]any{"id": "o1", "pk": "a", "n": 1})
	cr, err := cc.CreateItem(ctx, pk("a"), order, nil)
	if err != nil || cr.RawResponse.StatusCode != http.StatusCreated || cr.ETag == "" {
		t.Fatalf("CreateItem: %v (%+v)", err, cr.Response)
	}
	if len(cr.Value) != 0 {
		t.Fatalf("CreateItem without EnableContentResponseOnWrite returned %s; want no body (Prefer: return=minimal)", cr.Value)
	}
	_, err = cc.CreateItem(ctx, pk("a"), order, nil)
	wantStatus(t, "CreateItem of an existing id", err, http.StatusConflict, "already exists")
	// The same id in another logical partition is another item.
	if _, err := cc.CreateItem(ctx, pk("b"), doc(t, map[string]any{"id": "o1", "pk": "b"}), nil); err != nil {
		t.Fatalf("CreateItem of the id in another partition: %v", err)
	}

	rr, err := cc.ReadItem(ctx, pk("a"), "o1", nil)
	if err != nil || rr.ETag != cr.ETag {
		t.Fatalf("ReadItem: %v, etag %q want %q", err, rr.ETag, cr.ETag)
	}
	if m := decode(t, rr.Value); m["n"] != 1.0 || m["_etag"] != string(cr.ETag) || m["_ts"] == nil || m["_rid"] == nil {
		t.Fatalf("ReadItem value = %v", m)
	}
	_, err = cc.ReadItem(ctx, pk("a"), "o2", nil)
	wantStatus(t, "ReadItem of a missing id", err, http.StatusNotFound, "")
	_, err = cc.ReadItem(ctx, pk("c"), "o1", nil)
	wantStatus(t, "ReadItem in the wrong partition", err, http.StatusNotFound, "")

	stale := cr.ETag
	rep, err := cc.ReplaceItem(ctx, pk("a"), "o1", doc(t, map[string]any{"id": "o1", "pk": "a", "n": 2}),
		&azcosmos.ItemOptions{IfMatchEtag: &stale, EnableContentResponseOnWrite: true})
	if err != nil || rep.ETag == stale || decode(t, rep.Value)["n"] != 2.0 {
		t.Fatalf("ReplaceItem with the current ETag: %v", err)
	}
	_, err = cc.ReplaceItem(ctx, pk("a"), "o1", order, &azcosmos.ItemOptions{IfMatchEtag: &stale})
	wantStatus(t, "ReplaceItem with a stale ETag", err, http.StatusPreconditionFailed, "precondition")
	_, err = cc.ReplaceItem(ctx, pk("a"), "o9", doc(t, map[string]any{"id": "o9", "pk": "a"}), nil)
	wantStatus(t, "ReplaceItem of a missing id", err, http.StatusNotFound, "")
	_, err = cc.DeleteItem(ctx, pk("a"), "o1", &azcosmos.ItemOptions{IfMatchEtag: &stale})
	wantStatus(t, "DeleteItem with a stale ETag", err, http.StatusPreconditionFailed, "")

	up, err := cc.UpsertItem(ctx, pk("a"), doc(t, map[string]any{"id": "o1", "pk": "a", "n": 3}), nil)
	if err != nil || up.RawResponse.StatusCode != http.StatusOK {
		t.Fatalf("UpsertItem of an existing item: %v", err)
	}
	up, err = cc.UpsertItem(ctx, pk("a"), doc(t, map[string]any{"id": "o2", "pk": "a"}), nil)
	if err != nil || up.RawResponse.StatusCode != http.StatusCreated {
		t.Fatalf("UpsertItem of a new item: %v", err)
	}

	cur := up.ETag
	if _, err := cc.DeleteItem(ctx, pk("a"), "o2", &azcosmos.ItemOptions{IfMatchEtag: &cur}); err != nil {
		t.Fatalf("DeleteItem with the current ETag: %v", err)
	}
	_, err = cc.ReadItem(ctx, pk("a"), "o2", nil)
	wantStatus(t, "ReadItem after DeleteItem", err, http.StatusNotFound, "")
	_, err = cc.DeleteItem(ctx, pk("a"), "o2", nil)
	wantStatus(t, "DeleteItem of a missing id", err, http.StatusNotFound, "")
}

// Bad items and partition keys are refused with 400, nothing written.
func TestItemRefusals(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	for _, tc := range []struct {
		name string
		pk   azcosmos.PartitionKey
		item map[string]any
		want string
	}{
		{"partition key of the item differs", pk("a"), map[string]any{"id": "x", "pk": "b"}, "doesn't match"},
		{"item without its partition key", pk("a"), map[string]any{"id": "x"}, "doesn't match"},
		{"no partition key header", azcosmos.NewPartitionKey(), map[string]any{"id": "x", "pk": "a"}, "PartitionKey value must be supplied"},
		{"no id", pk("a"), map[string]any{"pk": "a"}, "'id; '"},
		{"id with a slash", pk("a"), map[string]any{"id": "a/b", "pk": "a"}, "'/'"},
		{"id too long", pk("a"), map[string]any{"id": strings.Repeat("i", 256), "pk": "a"}, "limit is 255"},
		{"ttl zero", pk("a"), map[string]any{"id": "x", "pk": "a", "ttl": 0}, "ttl"},
		{"ttl not a number", pk("a"), map[string]any{"id": "x", "pk": "a", "ttl": "1"}, "ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cc.CreateItem(ctx, tc.pk, doc(t, tc.item), nil)
			wantStatus(t, "CreateItem", err, http.StatusBadRequest, tc.want)
		})
	}
	_, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "big", "pk": "a", "v": strings.Repeat("x", 2<<20)}), nil)
	wantStatus(t, "CreateItem over 2 MB", err, http.StatusRequestEntityTooLarge, "too large")
	_, err = cc.ReadItem(ctx, pk("a"), "x", nil)
	wantStatus(t, "ReadItem after the refusals", err, http.StatusNotFound, "")
}

// Patch: operations applied all or none, under a condition (412 when it
// does not hold); the id and the partition key cannot be patched.
func TestPatch(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	if _, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a", "token": 7, "state": "held", "gone": true}), nil); err != nil {
		t.Fatal(err)
	}
	var ops azcosmos.PatchOperations
	ops.SetCondition("from c where c.token = 7 and c.state = 'held'")
	ops.AppendSet("/state", "done")
	ops.AppendIncrement("/token", 1)
	ops.AppendRemove("/gone")
	ops.AppendAdd("/result", map[string]any{"x": 1})
	r, err := cc.PatchItem(ctx, pk("a"), "o", ops, &azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
	if err != nil {
		t.Fatalf("PatchItem: %v", err)
	}
	if m := decode(t, r.Value); m["state"] != "done" || m["token"] != 8.0 || m["gone"] != nil || m["result"] == nil {
		t.Fatalf("patched item = %v", m)
	}
	_, err = cc.PatchItem(ctx, pk("a"), "o", ops, nil)
	wantStatus(t, "PatchItem whose condition no longer holds", err, http.StatusPreconditionFailed, "")

	for _, tc := range []struct {
		name string
		ops  func(*azcosmos.PatchOperations)
		want int
		text string
	}{
		{"the id", func(p *azcosmos.PatchOperations) { p.AppendSet("/id", "p") }, http.StatusBadRequest, "id"},
		{"the partition key", func(p *azcosmos.PatchOperations) { p.AppendSet("/pk", "b") }, http.StatusBadRequest, "partition key"},
		{"a missing property (replace)", func(p *azcosmos.PatchOperations) { p.AppendReplace("/nope", 1) }, http.StatusBadRequest, "does not exist"},
		{"then one that fails", func(p *azcosmos.PatchOperations) {
			p.AppendSet("/state", "other")
			p.AppendRemove("/nope")
		}, http.StatusBadRequest, "does not exist"},
		{"an array element", func(p *azcosmos.PatchOperations) { p.AppendSet("/list/0", 1) }, http.StatusBadRequest, "does not model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p azcosmos.PatchOperations
			tc.ops(&p)
			_, err := cc.PatchItem(ctx, pk("a"), "o", p, nil)
			wantStatus(t, "PatchItem", err, tc.want, tc.text)
		})
	}
	rr, err := cc.ReadItem(ctx, pk("a"), "o", nil)
	if m := decode(t, rr.Value); err != nil || m["state"] != "done" {
		t.Fatalf("after the refused patches: %v, %v; want them to have changed nothing", m, err)
	}
}

// Session tokens are returned and accepted; a consistency level weaker
// than the account's is accepted and a stronger one refused.
func TestSessionAndConsistency(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	cr, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a"}), nil)
	if err != nil || cr.SessionToken == nil {
		t.Fatalf("CreateItem: %v, session token %v", err, cr.SessionToken)
	}
	eventual, strong := azcosmos.ConsistencyLevelEventual, azcosmos.ConsistencyLevelStrong
	if _, err := cc.ReadItem(ctx, pk("a"), "o", &azcosmos.ItemOptions{SessionToken: cr.SessionToken, ConsistencyLevel: &eventual}); err != nil {
		t.Fatalf("ReadItem with a session token, eventual: %v", err)
	}
	_, err = cc.ReadItem(ctx, pk("a"), "o", &azcosmos.ItemOptions{ConsistencyLevel: &strong})
	wantStatus(t, "ReadItem asking for strong consistency", err, http.StatusBadRequest, "stronger")
}

// Throttling on demand: 429 with x-ms-retry-after-ms, which the client
// waits out and retries; past its retries the caller gets the 429.
func TestThrottle(t *testing.T) {
	srv, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	srv.Throttle(2, time.Millisecond)
	if _, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a"}), nil); err != nil {
		t.Fatalf("CreateItem throttled twice: %v; want the client's retries to get through", err)
	}
	srv.Throttle(100, time.Millisecond)
	_, err := cc.ReadItem(ctx, pk("a"), "o", nil)
	wantStatus(t, "ReadItem throttled past the retries", err, http.StatusTooManyRequests, "Request rate is large")
	var re *azcore.ResponseError
	if !strings.Contains(err.Error(), "429") || !errorsAs(err, &re) || re.RawResponse.Header.Get("x-ms-retry-after-ms") != "1" {
		t.Fatalf("429 answer: %v", err)
	}
	srv.Throttle(0, 0)
	if st := srv.Stats(); st.Requests == 0 || st.RequestCharge == 0 {
		t.Fatalf("Stats = %+v", st)
	}
}
