package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// InProcessCosmos is the --store value that runs the demo on an in-process
// Azure Cosmos DB account (cosmostest: the real azcosmos client over
// HTTPS), as --broker servicebus runs it on an in-process Service Bus.
const InProcessCosmos = "cosmos"

// inProcessCosmos starts a cosmostest account and returns its DSN (its
// certificate in a temporary file as ?ca=, the emulator's key the
// default) and how to stop it.
func inProcessCosmos() (string, func(), error) {
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("in-process Cosmos DB: %w", err)
	}
	dir, err := os.MkdirTemp("", "idem-demo-cosmos-")
	if err != nil {
		srv.Close()
		return "", nil, fmt.Errorf("temporary directory for the Cosmos DB certificate: %w", err)
	}
	stop := func() { srv.Close(); os.RemoveAll(dir) }
	ca := filepath.Join(dir, "cosmostest.pem")
	if err := os.WriteFile(ca, srv.CertificatePEM(), 0o600); err != nil {
		stop()
		return "", nil, err
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL(), "https://"), "/")
	return "cosmos://" + host + "?ca=" + ca, stop, nil
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
