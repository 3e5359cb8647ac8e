package cosmostest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// Time to live: the container's default and each item's own ttl, counted
// from the item's last write; an expired item is gone for reads, queries
// and writes (a create succeeds over it). A container without a default
// ignores item ttls, as Cosmos DB does.
func TestTimeToLive(t *testing.T) {
	minus1, ten := int32(-1), int32(10)
	for _, tc := range []struct {
		name       string
		defaultTTL *int32
		ttl        any // the item's; nil: none
		gone       time.Duration
	}{
		{"default -1, item 5s", &minus1, 5, 5 * time.Second},
		{"default -1, no item ttl", &minus1, nil, 0},
		{"default 10s, no item ttl", &ten, nil, 10 * time.Second},
		{"default 10s, item -1", &ten, -1, 0},
		{"default 10s, item 3s", &ten, 3, 3 * time.Second},
		{"no default, item 5s (ignored)", nil, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, c := newServerWith(t, cosmostest.Options{Now: frozen})
			cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "ttl", DefaultTimeToLive: tc.defaultTTL})
			item := map[string]any{"id": "o", "pk": "a"}
			if tc.ttl != nil {
				item["ttl"] = tc.ttl
			}
			if _, err := cc.CreateItem(ctx, pk("a"), doc(t, item), nil); err != nil {
				t.Fatal(err)
			}
			if tc.gone == 0 {
				srv.Advance(1000 * time.Hour)
				if _, err := cc.ReadItem(ctx, pk("a"), "o", nil); err != nil {
					t.Fatalf("ReadItem long after: %v; want the item kept", err)
				}
				return
			}
			srv.Advance(tc.gone - time.Millisecond)
			if _, err := cc.ReadItem(ctx, pk("a"), "o", nil); err != nil {
				t.Fatalf("ReadItem just before its ttl: %v", err)
			}
			srv.Advance(time.Millisecond)
			_, err := cc.ReadItem(ctx, pk("a"), "o", nil)
			wantStatus(t, "ReadItem at its ttl", err, http.StatusNotFound, "")
			q := cc.NewQueryItemsPager("SELECT * FROM c", pk("a"), nil)
			page, err := q.NextPage(ctx)
			if err != nil || len(page.Items) != 0 {
				t.Fatalf("query after expiry: %d items, %v", len(page.Items), err)
			}
			if _, err := cc.CreateItem(ctx, pk("a"), doc(t, item), nil); err != nil {
				t.Fatalf("CreateItem over the expired item: %v", err)
			}
		})
	}
}

// A write restarts an item's time to live; a replace may change or drop
// its ttl.
func TestTimeToLiveFromLastWrite(t *testing.T) {
	srv, c := newServerWith(t, cosmostest.Options{Now: frozen})
	minus1 := int32(-1)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "ttl", DefaultTimeToLive: &minus1})
	if _, err := cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a", "ttl": 5}), nil); err != nil {
		t.Fatal(err)
	}
	srv.Advance(4 * time.Second)
	if _, err := cc.ReplaceItem(ctx, pk("a"), "o", doc(t, map[string]any{"id": "o", "pk": "a", "ttl": 5}), nil); err != nil {
		t.Fatal(err)
	}
	srv.Advance(4 * time.Second)
	if _, err := cc.ReadItem(ctx, pk("a"), "o", nil); err != nil {
		t.Fatalf("ReadItem 4s after a replace with ttl 5: %v", err)
	}
	if _, err := cc.ReplaceItem(ctx, pk("a"), "o", doc(t, map[string]any{"id": "o", "pk": "a", "ttl": -1}), nil); err != nil {
		t.Fatal(err)
	}
	srv.Advance(1000 * time.Hour)
	if _, err := cc.ReadItem(ctx, pk("a"), "o", nil); err != nil {
		t.Fatalf("ReadItem of an item with ttl -1: %v", err)
	}
}
