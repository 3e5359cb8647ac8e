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

// The inboxes' cost per message, the order and one line written in one
// batch, against the same batch sent without idem (a plain transactional
// batch of the two documents): the batch inbox adds its marker to the
// batch; the entity inbox adds nothing but a property. A duplicate costs
// a refused batch and the read of the rerun.
func BenchmarkInbox(b *testing.B) {
	ctx := context.Background()
	docs := func(id string) ([]byte, []byte) {
		return []byte(fmt.Sprintf(`{"id": %q, "orderId": %q, "customer": "ana", "total": 900}`, id, id)),
			[]byte(fmt.Sprintf(`{"id": %q, "orderId": %q, "sku": "tea", "qty": 2, "price": 450}`, id+"-line-1", id))
	}
	setup := func(b *testing.B) (*cosmostest.Server, *azcosmos.ContainerClient) {
		srv, c := ownAccount(b, cosmostest.Options{})
		return srv, businessContainer(b, c)
	}
	b.Run("PlainBatch", func(b *testing.B) {
		srv, coll := setup(b)
		before := srv.Stats()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("o-%d", i)
			order, line := docs(id)
			tb := coll.NewTransactionalBatch(azcosmos.NewPartitionKeyString(id))
			tb.CreateItem(order, nil)
			tb.CreateItem(line, nil)
			if resp, err := coll.ExecuteTransactionalBatch(ctx, tb, nil); err != nil || !resp.Success {
				b.Fatal(err)
			}
		}
		reportRU(b, srv, before)
	})
	guard := func(b *testing.B, ts idem.TxStore[*cosmos.Batch], err error) *idem.Guard {
		if err != nil {
			b.Fatal(err)
		}
		g, err := idem.NewInbox(ts, idem.Options{Scope: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	batchInbox := func(b *testing.B, coll *azcosmos.ContainerClient) *idem.Guard {
		inbox, err := cosmos.NewBatchInbox(coll, cosmos.InboxOptions{PartitionKeyPath: "/orderId"})
		return guard(b, inbox, err)
	}
	entityInbox := func(b *testing.B, coll *azcosmos.ContainerClient) *idem.Guard {
		inbox, err := cosmos.NewEntityInbox(coll)
		return guard(b, inbox, err)
	}
	withMarker := func(ctx context.Context, bt *cosmos.Batch) ([]byte, error) {
		k, _ := idem.KeyFromContext(ctx)
		order, line := docs(k.ID)
		bt.CreateItem(order, nil)
		bt.CreateItem(line, nil)
		return nil, nil
	}
	asEntity := func(coll *azcosmos.ContainerClient) idem.TxHandler[*cosmos.Batch] {
		orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId"}
		return func(ctx context.Context, bt *cosmos.Batch) ([]byte, error) {
			k, _ := idem.KeyFromContext(ctx)
			_, line := docs(k.ID)
			if err := orders.Insert(ctx, bt, k.ID, "fp", map[string]any{"customer": "ana", "total": 900}); err != nil {
				return nil, err
			}
			bt.CreateItem(line, nil)
			return nil, nil
		}
	}
	for _, tc := range []struct {
		name    string
		guard   func(*testing.B, *azcosmos.ContainerClient) *idem.Guard
		handler func(*azcosmos.ContainerClient) idem.TxHandler[*cosmos.Batch]
	}{
		{"BatchInbox", batchInbox, func(*azcosmos.ContainerClient) idem.TxHandler[*cosmos.Batch] { return withMarker }},
		{"EntityInbox", entityInbox, asEntity},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv, coll := setup(b)
			g, h := tc.guard(b, coll), tc.handler(coll)
			before := srv.Stats()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("o-%d", i)
				if res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte("fp")}, h); err != nil || res.Outcome != idem.OutcomeProcessed {
					b.Fatal(res.Outcome, err)
				}
			}
			reportRU(b, srv, before)
		})
		b.Run(tc.name+"Duplicate", func(b *testing.B) {
			srv, coll := setup(b)
			g, h := tc.guard(b, coll), tc.handler(coll)
			msg := idem.Message{ID: "o-dup", Payload: []byte("fp")}
			if _, err := idem.DoTx(ctx, g, msg, h); err != nil {
				b.Fatal(err)
			}
			before := srv.Stats()
			for b.Loop() {
				if res, err := idem.DoTx(ctx, g, msg, h); err != nil || res.Outcome != idem.OutcomeDuplicate {
					b.Fatal(res.Outcome, err)
				}
			}
			reportRU(b, srv, before)
		})
	}
}
