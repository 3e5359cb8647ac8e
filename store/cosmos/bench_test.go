package cosmos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
	"github.com/idemgo/idem/store/storetest"
)

// benchServer is a store on a cosmostest server of the benchmark's own, so
// its request-unit totals are the benchmark's alone.
func benchServer(b *testing.B) (*cosmostest.Server, *cosmos.Store) {
	b.Helper()
	return ownStore(b, cosmostest.Options{})
}

// reportRU reports the request units per operation charged since before.
func reportRU(b *testing.B, srv *cosmostest.Server, before cosmostest.Stats) {
	after := srv.Stats()
	b.ReportMetric((after.RequestCharge-before.RequestCharge)/float64(b.N), "RU/op")
	b.ReportMetric(float64(after.Requests-before.Requests)/float64(b.N), "requests/op")
}

// The store's cost per message against a plain create of a document of
// the same size: a new key's claim and completion, and a duplicate's
// claim.
func BenchmarkMessage(b *testing.B) {
	ctx := context.Background()
	now := storetest.T0
	req := func(id string) idem.ClaimRequest {
		return idem.ClaimRequest{Key: idem.Key{Scope: "bench", ID: id}, Fingerprint: "sha256:0123456789abcdef", Now: now,
			LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
	}
	b.Run("ClaimComplete", func(b *testing.B) {
		srv, s := benchServer(b)
		before := srv.Stats()
		for i := 0; b.Loop(); i++ {
			r := req(fmt.Sprintf("order-%d", i))
			c, err := s.Claim(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, idem.CompleteRequest{Key: r.Key, Token: c.Record.Token, Result: []byte(`{"ok":true}`), Now: now, ExpiresAt: r.ExpiresAt}); err != nil {
				b.Fatal(err)
			}
		}
		reportRU(b, srv, before)
	})
	b.Run("Duplicate", func(b *testing.B) {
		srv, s := benchServer(b)
		r := req("order-dup")
		c, err := s.Claim(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, idem.CompleteRequest{Key: r.Key, Token: c.Record.Token, Now: now, ExpiresAt: r.ExpiresAt}); err != nil {
			b.Fatal(err)
		}
		before := srv.Stats()
		for b.Loop() {
			if c, err := s.Claim(ctx, r); err != nil || c.Outcome != idem.ClaimDuplicate {
				b.Fatal(c.Outcome, err)
			}
		}
		reportRU(b, srv, before)
	})
	b.Run("PlainCreate", func(b *testing.B) {
		srv, s := benchServer(b)
		// A document the size of a record.
		doc := map[string]any{"id": "", "pk": "00", "scope": "bench", "sid": "order-0", "ord": "62656e6368-6f726465722d30",
			"state": "completed", "fp": "sha256:0123456789abcdef", "token": 1 << 40, "attempts": 1, "lease": 1, "exp": 1,
			"created": 1, "updated": 1, "ttl": 86400, "result": "eyJvayI6dHJ1ZX0="}
		pk := azcosmos.NewPartitionKeyString("00")
		before := srv.Stats()
		for i := 0; b.Loop(); i++ {
			doc["id"] = fmt.Sprintf("plain-%d", i)
			body, _ := json.Marshal(doc)
			if _, err := s.Container().CreateItem(ctx, pk, body, nil); err != nil {
				b.Fatal(err)
			}
		}
		reportRU(b, srv, before)
	})
}
