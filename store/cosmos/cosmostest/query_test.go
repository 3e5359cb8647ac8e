package cosmostest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// queryAll pages through a query and returns each item's field f (or the
// whole item as text when f is "").
func queryAll(t *testing.T, cc *azcosmos.ContainerClient, q string, key azcosmos.PartitionKey, o *azcosmos.QueryOptions) ([]string, int, error) {
	t.Helper()
	pager := cc.NewQueryItemsPager(q, key, o)
	var out []string
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, pages, err
		}
		pages++
		for _, it := range page.Items {
			var m map[string]any
			_ = json.Unmarshal(it, &m)
			if id, ok := m["id"]; ok {
				out = append(out, fmt.Sprint(id))
			} else {
				out = append(out, string(it))
			}
		}
	}
	return out, pages, nil
}

// fill creates items o00..o19 in partition a (n = i, even ones with
// tag "even") and p00..p09 in partition b.
func fill(t *testing.T) *azcosmos.ContainerClient {
	t.Helper()
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "q", IndexingPolicy: &azcosmos.IndexingPolicy{
		IndexingMode: azcosmos.IndexingModeConsistent, Automatic: true,
		IncludedPaths: []azcosmos.IncludedPath{{Path: "/*"}},
		CompositeIndexes: [][]azcosmos.CompositeIndex{{
			{Path: "/tag", Order: azcosmos.CompositeIndexAscending}, {Path: "/n", Order: azcosmos.CompositeIndexDescending}}},
	}})
	for i := range 20 {
		m := map[string]any{"id": fmt.Sprintf("o%02d", 19-i), "pk": "a", "n": 19 - i, "s": fmt.Sprintf("k%02d", 19-i)}
		if i%2 == 1 {
			m["tag"] = "even"
		}
		if _, err := cc.CreateItem(ctx, pk("a"), doc(t, m), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := cc.CreateItem(ctx, pk("b"), doc(t, map[string]any{"id": fmt.Sprintf("p%02d", i), "pk": "b", "n": i}), nil); err != nil {
			t.Fatal(err)
		}
	}
	return cc
}

func ids(prefix string, from, to, step int) []string {
	var out []string
	for i := from; step > 0 && i < to || step < 0 && i > to; i += step {
		out = append(out, fmt.Sprintf("%s%02d", prefix, i))
	}
	return out
}

// The query forms a store uses, in one partition and across partitions.
func TestQueries(t *testing.T) {
	cc := fill(t)
	param := func(name string, v any) []azcosmos.QueryParameter {
		return []azcosmos.QueryParameter{{Name: name, Value: v}}
	}
	for _, tc := range []struct {
		name   string
		query  string
		pk     azcosmos.PartitionKey
		params []azcosmos.QueryParameter
		page   int32
		want   []string
		sorted bool // compare as a set: a feed's order is not promised
	}{
		{"all of a partition, in creation order", "SELECT * FROM c", pk("a"), nil, 0, ids("o", 19, -1, -1), false},
		{"ORDER BY a number", "SELECT * FROM c ORDER BY c.n", pk("a"), nil, 0, ids("o", 0, 20, 1), false},
		{"ORDER BY DESC, paged by 3", "SELECT * FROM c ORDER BY c.s DESC", pk("a"), nil, 3, ids("o", 19, -1, -1), false},
		{"WHERE with a parameter and a range", "SELECT * FROM c WHERE c.n >= @from AND c.n < 15 ORDER BY c.n", pk("a"), param("@from", 12), 0, ids("o", 12, 15, 1), false},
		{"WHERE on a string range", "SELECT * FROM root WHERE root.s > @after ORDER BY root.s", pk("a"), param("@after", "k17"), 0, ids("o", 18, 20, 1), false},
		{"OFFSET LIMIT", "SELECT * FROM c ORDER BY c.n OFFSET 2 LIMIT 3", pk("a"), nil, 0, ids("o", 2, 5, 1), false},
		{"OFFSET LIMIT by parameters, paged by 2", "SELECT * FROM c ORDER BY c.n OFFSET @o LIMIT @l", pk("a"),
			[]azcosmos.QueryParameter{{Name: "@o", Value: 1}, {Name: "@l", Value: 5}}, 2, ids("o", 1, 6, 1), false},
		{"TOP", "SELECT TOP 2 * FROM c ORDER BY c.n DESC", pk("a"), nil, 0, ids("o", 19, 17, -1), false},
		{"IS_DEFINED and NOT", "SELECT * FROM c WHERE NOT IS_DEFINED(c.tag) AND c.n < 6 ORDER BY c.n", pk("a"), nil, 0, []string{"o01", "o03", "o05"}, false},
		{"IN and OR", "SELECT * FROM c WHERE c.n IN (1, 2) OR c['s'] = 'k03' ORDER BY c.n", pk("a"), nil, 0, ids("o", 1, 4, 1), false},
		{"a comparison of other types is undefined", "SELECT * FROM c WHERE c.n > 'a' OR c.s = 3", pk("a"), nil, 0, nil, false},
		{"an ORDER BY the composite index serves", "SELECT * FROM c WHERE c.n < 6 ORDER BY c.tag, c.n DESC", pk("a"), nil, 0, []string{"o05", "o03", "o01", "o04", "o02", "o00"}, false},
		{"across partitions, filtered", "SELECT * FROM c WHERE c.n < 2", azcosmos.NewPartitionKey(), nil, 0, []string{"o00", "o01", "p00", "p01"}, true},
		{"across partitions, paged by 7", "SELECT * FROM c", azcosmos.NewPartitionKey(), nil, 7, append(ids("o", 0, 20, 1), ids("p", 0, 10, 1)...), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, pages, err := queryAll(t, cc, tc.query, tc.pk, &azcosmos.QueryOptions{QueryParameters: tc.params, PageSizeHint: tc.page})
			if err != nil {
				t.Fatalf("%s: %v", tc.query, err)
			}
			if tc.sorted {
				slices.Sort(got)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("%s = %v; want %v", tc.query, got, tc.want)
			}
			if tc.page > 0 && pages < len(tc.want)/int(tc.page) {
				t.Fatalf("%s in %d pages of %d; want them paged", tc.query, pages, tc.page)
			}
		})
	}
}

// Projections and COUNT.
func TestQueryProjectionAndCount(t *testing.T) {
	cc := fill(t)
	got, _, err := queryAll(t, cc, "SELECT c.n, c.s AS key FROM c WHERE c.n = 3", pk("a"), nil)
	if err != nil || len(got) != 1 || got[0] != `{"key":"k03","n":3}` {
		t.Fatalf("projection = %v, %v", got, err)
	}
	got, _, err = queryAll(t, cc, "SELECT VALUE COUNT(1) FROM c WHERE IS_DEFINED(c.tag)", pk("a"), nil)
	if err != nil || len(got) != 1 || got[0] != "10" {
		t.Fatalf("COUNT = %v, %v", got, err)
	}
}

// What the gateway cannot serve, or the server does not model, is refused
// with 400 at once.
func TestQueryRefusals(t *testing.T) {
	cc := fill(t)
	off := false
	for _, tc := range []struct {
		name, query string
		pk          azcosmos.PartitionKey
		o           *azcosmos.QueryOptions
		want        string
	}{
		{"ORDER BY across partitions", "SELECT * FROM c ORDER BY c.n", azcosmos.NewPartitionKey(), nil, "can not be directly served by the gateway"},
		{"OFFSET LIMIT across partitions", "SELECT * FROM c OFFSET 0 LIMIT 1", azcosmos.NewPartitionKey(), nil, "can not be directly served"},
		{"COUNT across partitions", "SELECT VALUE COUNT(1) FROM c", azcosmos.NewPartitionKey(), nil, "can not be directly served"},
		{"cross-partition disabled", "SELECT * FROM c", azcosmos.NewPartitionKey(), &azcosmos.QueryOptions{EnableCrossPartitionQuery: &off}, "Cross partition query is required but disabled"},
		{"ORDER BY two paths without a composite index", "SELECT * FROM c ORDER BY c.n, c.s", pk("a"), nil, "composite index"},
		{"a missing parameter", "SELECT * FROM c WHERE c.n = @n", pk("a"), nil, "@n is not defined"},
		{"another alias", "SELECT * FROM c WHERE d.n = 1", pk("a"), nil, "could not be resolved"},
		{"a syntax error", "SELECT * FROM c WHERE", pk("a"), nil, "Syntax error"},
		{"JOIN", "SELECT * FROM c JOIN t IN c.tags", pk("a"), nil, "does not model JOIN"},
		{"GROUP BY", "SELECT c.n FROM c GROUP BY c.n", pk("a"), nil, "does not model GROUP BY"},
		{"DISTINCT", "SELECT DISTINCT c.n FROM c", pk("a"), nil, "does not model DISTINCT"},
		{"a function", "SELECT * FROM c WHERE STARTSWITH(c.s, 'k')", pk("a"), nil, "does not model the function STARTSWITH"},
		{"arithmetic", "SELECT * FROM c WHERE c.n - 1 = 0", pk("a"), nil, "Syntax error"},
		{"an aggregate in the list", "SELECT MAX(c.n) FROM c", pk("a"), nil, "does not model functions and aggregates"},
		{"an array index", "SELECT * FROM c WHERE c.tags[0] = 'x'", pk("a"), nil, "does not model array indexes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := queryAll(t, cc, tc.query, tc.pk, tc.o)
			wantStatus(t, tc.query, err, http.StatusBadRequest, tc.want)
		})
	}
}

// The operations of the SDK it does not model are refused with a 400 that
// names them, never served with other semantics.
func TestUnmodelledRefusedAtOnce(t *testing.T) {
	_, c := newServer(t)
	cc := newContainer(t, c, azcosmos.ContainerProperties{ID: "items"})
	db, _ := c.NewDatabase("db")
	_, err := c.NewQueryDatabasesPager("SELECT * FROM d", nil).NextPage(ctx)
	wantStatus(t, "querying databases", err, http.StatusBadRequest, "does not model")
	_, err = db.NewQueryContainersPager("SELECT * FROM c", nil).NextPage(ctx)
	wantStatus(t, "querying containers", err, http.StatusBadRequest, "does not model")
	_, err = cc.ReadThroughput(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "does not model") {
		t.Fatalf("ReadThroughput: %v; want a refusal", err)
	}
	_, err = cc.CreateItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a"}), &azcosmos.ItemOptions{PreTriggers: []string{"t"}})
	wantStatus(t, "a pre-trigger", err, http.StatusBadRequest, "does not model triggers")
	mh := azcosmos.ContainerProperties{ID: "h", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Kind: azcosmos.PartitionKeyKindMultiHash, Paths: []string{"/a", "/b"}, Version: 2}}
	_, err = db.CreateContainer(ctx, mh, nil)
	wantStatus(t, "a hierarchical partition key", err, http.StatusBadRequest, "does not model hierarchical partition keys")
	etag := azcore.ETag(`"x"`)
	_, err = cc.UpsertItem(ctx, pk("a"), doc(t, map[string]any{"id": "o", "pk": "a"}), &azcosmos.ItemOptions{IfMatchEtag: &etag})
	wantStatus(t, "If-Match on an upsert", err, http.StatusBadRequest, "does not model If-Match on an upsert")
}
