package main

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/cosmos"
)

// The commands that check a schema on a cosmos:// store: migrate --check
// names the missing database and container, then nothing once migrated;
// doctor reports a missing container as a trap, then a whole schema, the
// stale record the operator seeded, and no server clock to compare.
func TestCosmosSchemaCommands(t *testing.T) {
	d := operatorStores["cosmos"](t)
	code, out, _ := runCmd(t, "migrate", "--check", "--store", d)
	if code != exitFailure || !strings.Contains(out, "missing: database idem") || !strings.Contains(out, "missing: container idem/idem_cli_") {
		t.Fatalf("migrate --check before migrate: exit %d\n%s", code, out)
	}
	if _, fs := doctorRun(t, "--store", d); !has(fs, "schema", levelTrap, "missing: container") {
		t.Fatalf("doctor before migrate: %+v", fs)
	}
	for range 2 { // migrate again changes nothing
		if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK || !strings.Contains(out, "is up to date") {
			t.Fatalf("migrate: exit %d\n%s%s", code, out, errs)
		}
	}
	if code, out, _ := runCmd(t, "migrate", "--check", "--store", d); code != exitOK || !strings.Contains(out, "is whole") {
		t.Fatalf("migrate --check after migrate: exit %d\n%s", code, out)
	}
	h, err := dsn.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	seedStore(t, h.Store, false)
	_, fs := doctorRun(t, "--store", d, "--stale-after", "30s")
	if !has(fs, "schema", levelOK) || !has(fs, "stale", levelTrap, "billing/order-2") || !has(fs, "clock", levelNote, "no server clock") {
		t.Fatalf("doctor after migrate: %+v", fs)
	}

	// A container partitioned by another path is not the store's, and no
	// migrate can change that.
	if err := h.Native.(*cosmos.Store).Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, _ := h.Cosmos.NewDatabase(cosmos.DefaultDatabase)
	if _, err := db.CreateContainer(context.Background(), azcosmos.ContainerProperties{ID: h.Native.(*cosmos.Store).Container().ID(),
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/orderId"}}}, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "migrate", "--store", d)
	if code != exitFailure || !strings.Contains(errs, "is partitioned by [/orderId]") {
		t.Fatalf("migrate of a container partitioned by /orderId: exit %d\n%s%s", code, out, errs)
	}
}
