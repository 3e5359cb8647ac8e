package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/cosmos"
)

// InProcessCosmos is the --store value that runs the demo on an in-process
// Azure Cosmos DB account (cosmostest: the real azcosmos client over
// HTTPS), as --broker servicebus runs it on an in-process Service Bus.
const InProcessCosmos = "cosmos"

// inProcessCosmos starts an in-process account (dsn.InProcessCosmos, its
// certificate in a temporary directory) and returns its DSN and how to stop
// it.
func inProcessCosmos() (string, func(), error) {
	dir, err := os.MkdirTemp("", "idem-demo-cosmos-")
	if err != nil {
		return "", nil, fmt.Errorf("temporary directory for the Cosmos DB certificate: %w", err)
	}
	d, stop, err := dsn.InProcessCosmos(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return d, func() { stop(); os.RemoveAll(dir) }, nil
}

// removeCosmosRecords deletes the records of scope, found by a query across
// the container's partitions (the store's items keep the scope in "scope"
// and their partition key value in "pk", see store/cosmos's doc).
func removeCosmosRecords(ctx context.Context, st *cosmos.Store, scope string) (int64, error) {
	c := st.Container()
	pager := c.NewQueryItemsPager("SELECT c.id, c.pk FROM c WHERE c.scope = @scope", azcosmos.NewPartitionKey(),
		&azcosmos.QueryOptions{QueryParameters: []azcosmos.QueryParameter{{Name: "@scope", Value: scope}}})
	// Every page first, then the deletes: a query's pages are not a
	// snapshot, and deleting under them could skip records.
	type item struct{ ID, PK string }
	var items []item
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, raw := range page.Items {
			var it item
			if err := json.Unmarshal(raw, &it); err != nil {
				return 0, err
			}
			items = append(items, it)
		}
	}
	var n int64
	for _, it := range items {
		if _, err := c.DeleteItem(ctx, azcosmos.NewPartitionKeyString(it.PK), it.ID, nil); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
