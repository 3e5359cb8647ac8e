package mongostore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	mongostore "github.com/idemgo/idem/store/mongo"
)

// The collection dropped (its indexes with it): CheckSchema names the
// sweep index, and Migrate, which keeps no bookkeeping, makes it again.
func TestMigrateRecreatesDroppedIndexes(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, mongostore.Options{TTLIndex: mongostore.TTLNone})
	ctx := context.Background()
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
	if err := s.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	err := s.CheckSchema(ctx)
	var se *idem.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrSchemaMissing) || !strings.Contains(strings.Join(se.Missing, " "), mongostore.ExpiresIndex) ||
		!strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("CheckSchema after the drop = %v; want an *idem.SchemaError naming %s", err, mongostore.ExpiresIndex)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after the drop: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after the second Migrate: %v", err)
	}
}
