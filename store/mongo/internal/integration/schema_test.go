package integration_test

import (
	"context"
	"testing"

	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/storetest"
)

// The collection dropped (its indexes with it): CheckSchema names the
// sweep index, and Migrate, which keeps no bookkeeping, makes it again.
func TestMigrateRecreatesDroppedIndexes(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongoidem.Options{TTLIndex: mongoidem.TTLNone})
	ctx := context.Background()
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.WantSchemaError(t, "CheckSchema after the drop", s.CheckSchema(ctx), mongoidem.ExpiresIndex)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after the drop: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after the second Migrate: %v", err)
	}
}
