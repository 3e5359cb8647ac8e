package docs

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem/store/cosmos"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// The store guides' blocks (docs/stores/*.md) beyond stores_test.go's.

func guideMongo(ctx context.Context) error {
	// block: mongo
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:27017/?replicaSet=rs0"))
	if err != nil {
		return err
	}
	defer client.Disconnect(ctx)
	store, err := mongoidem.New(client.Database("app"), mongoidem.Options{}) // collection idem_records
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // the indexes and, where the server can, the TTL index
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

func guideCosmos(ctx context.Context, cred azcore.TokenCredential) error {
	// block: cosmos
	client, err := azcosmos.NewClient("https://ACCOUNT.documents.azure.com:443/", cred, nil) // or NewClientWithKey
	if err != nil {
		return err
	}
	store, err := cosmos.New(client, cosmos.Options{}) // database idem, container idem_records
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil { // the database and container, partitioned on /pk, ttl on
		return err
	}
	// block end
	return readmeTwoPhase(ctx, store)
}

var _ = []any{guideMongo, guideCosmos}
