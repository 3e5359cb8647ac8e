package cosmos_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/storetest"
)

// Migrate creates what is missing and is idempotent; CheckSchema names
// what is missing, and a container partitioned by another path is a
// *PartitionKeyError, which no migration fixes.
func TestMigrateAndCheckSchema(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	s, err := cosmos.New(c, cosmos.Options{Database: "idemtest_" + runID + "_schema", Container: uniqueContainer()})
	if err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema before Migrate", s.CheckSchema(ctx), "database idemtest_", "container ")
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	t.Cleanup(func() {
		db, _ := c.NewDatabase("idemtest_" + runID + "_schema")
		_, _ = db.Delete(context.Background(), nil)
	})
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	props, err := s.Container().Read(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := props.ContainerProperties; p.DefaultTimeToLive == nil || *p.DefaultTimeToLive != -1 ||
		len(p.PartitionKeyDefinition.Paths) != 1 || p.PartitionKeyDefinition.Paths[0] != cosmos.PartitionKeyPath {
		t.Fatalf("container made by Migrate: ttl %v, partition key %v", p.DefaultTimeToLive, p.PartitionKeyDefinition.Paths)
	}

	// A container without a default time to live ignores the records'
	// ttl: CheckSchema says so, Migrate sets it.
	p := *props.ContainerProperties
	p.DefaultTimeToLive = nil
	if _, err := s.Container().Replace(ctx, p, nil); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema without a default TTL", s.CheckSchema(ctx), "default time to live")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over a container without a default TTL: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate set the default TTL: %v", err)
	}

	// A container of the same name partitioned by another path.
	db, _ := c.NewDatabase("idemtest_" + runID + "_schema")
	other := uniqueContainer()
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: other,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/orderId"}}}, nil); err != nil {
		t.Fatal(err)
	}
	w, err := cosmos.New(c, cosmos.Options{Database: "idemtest_" + runID + "_schema", Container: other})
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{"CheckSchema": w.CheckSchema(ctx), "Migrate": w.Migrate(ctx)} {
		var pke *cosmos.PartitionKeyError
		if !errors.As(err, &pke) || !errors.Is(err, cosmos.ErrPartitionKey) || len(pke.Paths) != 1 || pke.Paths[0] != "/orderId" ||
			!strings.Contains(err.Error(), "/pk") {
			t.Fatalf("%s of a container partitioned by /orderId: %v; want a *PartitionKeyError", what, err)
		}
	}
}

// Options: the zero value works; a nil client and names Cosmos DB would
// refuse are idem.ErrInvalidOptions, found by New.
func TestOptions(t *testing.T) {
	c := newClient(t)
	if _, err := cosmos.New(c, cosmos.Options{}); err != nil {
		t.Fatalf("New with the zero Options: %v", err)
	}
	if _, err := cosmos.New(nil, cosmos.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("New with a nil client: %v", err)
	}
	for _, o := range []cosmos.Options{
		{Container: "a/b"}, {Database: "a#b"}, {Container: strings.Repeat("c", 256)}, {Database: "trailing "},
		{Container: "q?"}, {Database: `back\slash`},
	} {
		if _, err := cosmos.New(c, o); !errors.Is(err, cosmos.ErrInvalidName) || !errors.Is(err, idem.ErrInvalidOptions) {
			t.Fatalf("New(%+v) = %v; want ErrInvalidName", o, err)
		}
	}
	if _, err := cosmos.New(c, cosmos.Options{BatchConcurrency: -1}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("a negative BatchConcurrency: %v", err)
	}
}
