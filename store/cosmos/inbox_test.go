package cosmos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/inboxcheck"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// batchGuard returns a BatchInbox on a fresh business container and a
// guard over it.
func batchGuard(t *testing.T, c *azcosmos.Client, opts idem.Options) (*azcosmos.ContainerClient, *cosmos.BatchInbox, *idem.Guard) {
	t.Helper()
	coll := businessContainer(t, c)
	inbox, err := cosmos.NewBatchInbox(coll, cosmos.InboxOptions{PartitionKeyPath: "/orderId"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.NewInbox(inbox, opts)
	if err != nil {
		t.Fatal(err)
	}
	return coll, inbox, g
}

// orderDocs adds an order and its invoice, in the order's partition.
func orderDocs(b *cosmos.Batch, id string) {
	b.CreateItem([]byte(fmt.Sprintf(`{"id": %q, "orderId": %q, "amount": 10}`, id, id)), nil)
	b.CreateItem([]byte(fmt.Sprintf(`{"id": %q, "orderId": %q, "invoice": true}`, id+"-invoice", id)), nil)
}

// TestBatchInboxDeliveries: 60 deliveries of 12 orders at once through
// idem.DoTx, each writing the marker, the order and its invoice in one
// transactional batch: each order's three items are stored once; 48
// duplicates, found by the batch's 409 on the marker or by the marker read
// of a rerun.
func TestBatchInboxDeliveries(t *testing.T) {
	var counter idem.Counter
	coll, inbox, g := batchGuard(t, newClient(t), idem.Options{Scope: "billing", Observer: &counter})
	inboxcheck.DeliveriesCommitted(t, g, &counter, 60, 12, func(ctx context.Context, b *cosmos.Batch, id string) error {
		orderDocs(b, id)
		return nil
	}, func(id string) int { return len(items(t, coll, id, fmt.Sprintf("c.id = '%s'", id))) })
	if all := items(t, coll, "", ""); len(all) != 36 {
		t.Fatalf("items %v, want 12 markers, 12 orders, 12 invoices", all)
	}
	if markers := items(t, coll, "", "IS_DEFINED(c.idem)"); len(markers) != 12 {
		t.Fatalf("markers %v, want 12", markers)
	}
	inboxcheck.NotAStore[*cosmos.Batch](t, inbox)
	inboxcheck.Refuses(t, g, idem.Message{ID: "p-1", Payload: []byte("p-1")})
}

// TestBatchInboxInsertRace: DoTx of one message from 16 goroutines at
// once, for 4 messages: one batch commits, every other delivery is a
// duplicate.
func TestBatchInboxInsertRace(t *testing.T) {
	coll, _, g := batchGuard(t, newClient(t), idem.Options{Scope: "billing"})
	ctx := context.Background()
	inboxcheck.InsertRace(t, 4, 16, func(id string) error {
		res, err := idem.DoTx(ctx, g, idem.Message{ID: id, Payload: []byte("same")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			orderDocs(b, id)
			return nil, nil
		})
		if err == nil && res.Outcome == idem.OutcomeDuplicate {
			return &idem.DuplicateError{}
		}
		return err
	})
	if all := items(t, coll, "", ""); len(all) != 12 {
		t.Fatalf("items %v, want 4 markers, orders and invoices", all)
	}
}

// txRuns records the transaction runs of each DoTx.
type txRuns struct{ last atomic.Int64 }

func (o *txRuns) Observe(_ context.Context, ev idem.Event) { o.last.Store(int64(ev.TxRuns)) }

// TestBatchInboxOutcomes: a message is processed in one batch and its
// result replayed to its duplicate; the duplicate costs a refused batch
// and a rerun that reads the marker; the same order id with other content
// is a conflict, dead-lettered, nothing written; a handler failure leaves
// nothing; a redelivery whose handler fails after the message was stored is
// a duplicate (the marker queued unread is read), not a failure.
func TestBatchInboxOutcomes(t *testing.T) {
	var runs txRuns
	coll, _, g := batchGuard(t, newClient(t), idem.Options{Scope: "billing", Observer: &runs})
	ctx := context.Background()
	var handled atomic.Int32
	handle := func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		handled.Add(1)
		orderDocs(b, "A-1")
		return []byte("charged"), nil
	}
	msg := idem.Message{ID: "A-1", Payload: []byte(`{"amount": 10}`)}
	res, err := idem.DoTx(ctx, g, msg, handle)
	if err != nil || res.Outcome != idem.OutcomeProcessed || runs.last.Load() != 1 {
		t.Fatalf("first delivery: %v, %v after %d runs", res.Outcome, err, runs.last.Load())
	}
	res, err = idem.DoTx(ctx, g, msg, handle)
	if err != nil || res.Outcome != idem.OutcomeDuplicate || string(res.Value) != "charged" || runs.last.Load() != 2 || handled.Load() != 2 {
		t.Fatalf("redelivery: %v %q, %v after %d runs and %d handler runs; want a duplicate replaying the result, 2 runs, the handler run once more",
			res.Outcome, res.Value, err, runs.last.Load(), handled.Load())
	}

	res, err = idem.DoTx(ctx, g, idem.Message{ID: "A-1", Payload: []byte(`{"amount": 99}`)}, handle)
	if res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter || !errors.Is(err, idem.ErrConflict) {
		t.Fatalf("reuse with other content: %v, %v", res.Outcome, err)
	}

	boom := errors.New("payment service down")
	res, err = idem.DoTx(ctx, g, idem.Message{ID: "B-1", Payload: []byte("b")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		orderDocs(b, "B-1")
		return nil, boom
	})
	if !errors.Is(err, boom) || res.Outcome != idem.OutcomeFailed || len(items(t, coll, "B-1", "")) != 0 {
		t.Fatalf("failing handler: %v, %v; items %v", res.Outcome, err, items(t, coll, "B-1", ""))
	}
	res, err = idem.DoTx(ctx, g, msg, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		return nil, boom
	})
	if err != nil || res.Outcome != idem.OutcomeDuplicate {
		t.Fatalf("a stored message whose redelivery's handler fails: %v, %v; want a duplicate", res.Outcome, err)
	}
	if all := items(t, coll, "", ""); len(all) != 3 {
		t.Fatalf("items %v, want A-1's three", all)
	}
}

// TestBatchInboxAllOrNone: a batch with an operation the server refuses
// writes nothing, the marker included: a document of another partition
// (400) and a document that exists from elsewhere (409) are permanent,
// dead-lettered; the message is processed once the cause is gone.
func TestBatchInboxAllOrNone(t *testing.T) {
	coll, _, g := batchGuard(t, newClient(t), idem.Options{Scope: "billing"})
	ctx := context.Background()
	if _, err := coll.CreateItem(ctx, azcosmos.NewPartitionKeyString("C-1"), []byte(`{"id": "C-1-invoice", "orderId": "C-1"}`), nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		add  func(b *cosmos.Batch)
		id   string
		op   int // the failing operation: the marker is 0
	}{
		{"another partition", func(b *cosmos.Batch) {
			b.CreateItem([]byte(`{"id": "x", "orderId": "elsewhere"}`), nil)
		}, "D-1", 1},
		{"an existing document", func(b *cosmos.Batch) { orderDocs(b, "C-1") }, "C-1", 2},
	} {
		res, err := idem.DoTx(ctx, g, idem.Message{ID: tc.id, Payload: []byte("p")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			tc.add(b)
			return nil, nil
		})
		var be *cosmos.BatchError
		if !errors.As(err, &be) || !errors.Is(err, idem.ErrInvalidData) || idem.Decide(res, err) != idem.ActionDeadLetter || be.Index != tc.op {
			t.Fatalf("%s: %v, %v; want a permanent *BatchError at operation %d", tc.name, res.Outcome, err, tc.op)
		}
		if got := items(t, coll, tc.id, "IS_DEFINED(c.idem)"); len(got) != 0 {
			t.Fatalf("%s: marker written: %v", tc.name, got)
		}
	}
	if _, err := coll.DeleteItem(ctx, azcosmos.NewPartitionKeyString("C-1"), "C-1-invoice", nil); err != nil {
		t.Fatal(err)
	}
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "C-1", Payload: []byte("p")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		orderDocs(b, "C-1")
		return nil, nil
	})
	if err != nil || res.Outcome != idem.OutcomeProcessed || len(items(t, coll, "C-1", "")) != 3 {
		t.Fatalf("after the cause is gone: %v, %v", res.Outcome, err)
	}
}

// TestBatchInboxExpiry: a marker whose retention ended by the caller's
// clock is taken over (the message processed again, the marker replaced
// under If-Match); Cosmos DB removes markers by their ttl on its own.
func TestBatchInboxExpiry(t *testing.T) {
	srv, c := ownAccount(t, cosmostest.Options{})
	now := time.Now()
	clock := func() time.Time { return now }
	coll, _, g := batchGuard(t, c, idem.Options{Scope: "billing", Retention: time.Hour, Clock: clock})
	ctx := context.Background()
	var n atomic.Int32
	handle := func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		n.Add(1)
		b.UpsertItem([]byte(fmt.Sprintf(`{"id": "E-1", "orderId": "E-1", "run": %d}`, n.Load())), nil)
		return nil, nil
	}
	msg := idem.Message{ID: "E-1", Payload: []byte("e")}
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		if res, err := idem.DoTx(ctx, g, msg, handle); err != nil || res.Outcome != want {
			t.Fatalf("delivery %d: %v, %v; want %v", i, res.Outcome, err, want)
		}
	}
	now = now.Add(2 * time.Hour) // the caller's clock: the retention is over
	if res, err := idem.DoTx(ctx, g, msg, handle); err != nil || res.Outcome != idem.OutcomeProcessed {
		t.Fatalf("after the retention: %v, %v; want processed again", res.Outcome, err)
	}
	if got := items(t, coll, "E-1", "IS_DEFINED(c.idem)"); len(got) != 1 {
		t.Fatalf("markers %v, want 1", got)
	}
	srv.Advance(2 * time.Hour) // the server's clock: the marker's ttl is over
	if got := items(t, coll, "E-1", "IS_DEFINED(c.idem)"); len(got) != 0 {
		t.Fatalf("markers %v after their ttl, want none", got)
	}
	if got := items(t, coll, "E-1", ""); len(got) != 1 {
		t.Fatalf("items %v: the order (no ttl) should stay", got)
	}
}

// TestBatchInboxMarkTx: a caller that runs the batch itself marks with
// idem.MarkTx, which reads the marker first.
func TestBatchInboxMarkTx(t *testing.T) {
	coll, inbox, g := batchGuard(t, newClient(t), idem.Options{Scope: "billing"})
	ctx := context.Background()
	msg := idem.Message{ID: "M-1", Payload: []byte("m")}
	for i, want := range []idem.Outcome{idem.OutcomeProcessed, idem.OutcomeDuplicate} {
		var got idem.Outcome
		err := inbox.InTx(ctx, func(ctx context.Context, b *cosmos.Batch) error {
			res, err := idem.MarkTx(ctx, g, b, msg)
			if err != nil {
				return err
			}
			got = res.Outcome
			if res.Outcome == idem.OutcomeProcessed {
				orderDocs(b, "M-1")
			}
			return nil
		})
		if err != nil || got != want {
			t.Fatalf("run %d: %v, %v; want %v", i, got, err, want)
		}
	}
	if all := items(t, coll, "M-1", ""); len(all) != 3 {
		t.Fatalf("items %v", all)
	}
}

// TestBatchRefusals: what a Batch and NewBatchInbox refuse.
func TestBatchRefusals(t *testing.T) {
	c := newClient(t)
	coll, _, g := batchGuard(t, c, idem.Options{Scope: "billing", MaxResultSize: 4 << 20})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts cosmos.InboxOptions
	}{
		{"no partition key path", cosmos.InboxOptions{}},
		{"a nested path", cosmos.InboxOptions{PartitionKeyPath: "/a/b"}},
		{"no slash", cosmos.InboxOptions{PartitionKeyPath: "orderId"}},
		{"the marker's id", cosmos.InboxOptions{PartitionKeyPath: "/id"}},
		{"the marker's record", cosmos.InboxOptions{PartitionKeyPath: "/idem"}},
	} {
		if _, err := cosmos.NewBatchInbox(coll, tc.opts); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("NewBatchInbox with %s = %v", tc.name, err)
		}
	}
	if _, err := cosmos.NewBatchInbox(nil, cosmos.InboxOptions{PartitionKeyPath: "/orderId"}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("NewBatchInbox(nil) = %v", err)
	}
	if _, err := cosmos.NewEntityInbox(nil); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("NewEntityInbox(nil) = %v", err)
	}

	orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId"}
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, b *cosmos.Batch) ([]byte, error)
	}{
		{"101 operations", func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			for i := range cosmos.MaxBatchOperations {
				b.CreateItem([]byte(fmt.Sprintf(`{"id": "l-%d", "orderId": "R-1"}`, i)), nil)
			}
			return nil, nil
		}},
		{"an entity of another partition", func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			return nil, orders.Insert(ctx, b, "R-2", "fp", nil)
		}},
	} {
		res, err := idem.DoTx(ctx, g, idem.Message{ID: "R-1", Payload: []byte("r")}, tc.fn)
		if !errors.Is(err, idem.ErrInvalidData) || idem.Decide(res, err) != idem.ActionDeadLetter {
			t.Errorf("%s: %v, %v; want invalid data", tc.name, res.Outcome, err)
		}
	}
	// An entity inbox's batch without an entity write has no partition.
	einbox, err := cosmos.NewEntityInbox(coll)
	if err != nil {
		t.Fatal(err)
	}
	err = einbox.InTx(ctx, func(ctx context.Context, b *cosmos.Batch) error {
		orderDocs(b, "R-3")
		return nil
	})
	if err == nil || !idem.IsPermanent(err) || !strings.Contains(err.Error(), "no partition") {
		t.Errorf("a batch without a partition: %v", err)
	}
	// A result over the limit is refused before anything is sent.
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "R-4", Payload: []byte("r")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		orderDocs(b, "R-4")
		return make([]byte, 2<<20), nil
	})
	if !errors.Is(err, idem.ErrInvalidData) || res.Outcome != idem.OutcomePermanent {
		t.Errorf("a result of 2 MiB: %v, %v", res.Outcome, err)
	}
	if all := items(t, coll, "", ""); len(all) != 0 {
		t.Fatalf("items %v after refusals", all)
	}
}
