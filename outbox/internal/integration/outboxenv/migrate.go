package outboxenv

import (
	"context"
	"testing"
	"time"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/outbox/outboxtest"
)

// NotBeforeAdded checks that Migrate gives an outbox table made before
// Message.NotBefore existed its not_before column: dropColumn takes the
// column away (the table as an older Migrate left it), migrate runs
// twice, and a message's NotBefore then comes back from Fetch.
func NotBeforeAdded(t *testing.T, s outboxtest.Subject, dropColumn func(context.Context) error, migrate func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropColumn(ctx); err != nil {
		t.Fatalf("drop not_before: %v", err)
	}
	for range 2 {
		if err := migrate(ctx); err != nil {
			t.Fatalf("migrate a table without not_before: %v", err)
		}
	}
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	err := s.InTx(ctx, func(ctx context.Context, enqueue outboxtest.Enqueue) error {
		return enqueue(ctx, outbox.Message{ID: "later", Destination: "d", Payload: []byte("x"), NotBefore: at})
	})
	if err != nil {
		t.Fatalf("enqueue after the migration: %v", err)
	}
	recs, err := s.Store.Fetch(ctx, outbox.FetchRequest{Now: time.Now().Add(time.Minute), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || !recs[0].NotBefore.Equal(at) {
		t.Fatalf("fetched %+v, want the message with NotBefore %v", recs, at)
	}
}
