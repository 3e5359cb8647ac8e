package cosmos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/inboxcheck"
	"github.com/idemgo/idem/store/cosmos"
)

type order struct {
	Amount int    `json:"amount"`
	Note   string `json:"note,omitempty"`
}

// readDoc reads the document id of partition id.
func readDoc(t testing.TB, coll *azcosmos.ContainerClient, id string) map[string]any {
	t.Helper()
	resp, err := coll.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(id), id, nil)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	var d map[string]any
	if err := json.Unmarshal(resp.Value, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEntityInsert: the seed's steps on one document at a time: 24
// deliveries of each order at once create it once (the document's id and
// partition key are the order id), the others read it and are duplicates;
// other content under a taken id is a conflict carrying the stored
// fingerprint.
func TestEntityInsert(t *testing.T) {
	coll := businessContainer(t, newClient(t))
	orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId", Scope: "orders"}
	ctx := context.Background()
	inboxcheck.InsertRace(t, 5, 24, func(id string) error {
		return orders.Insert(ctx, nil, id, "fp-A", order{Amount: 10})
	})
	if ids := items(t, coll, "", ""); len(ids) != 5 {
		t.Fatalf("documents %v, want 5", ids)
	}
	d := readDoc(t, coll, "o-1")
	if d["orderId"] != "o-1" || d["idemFingerprint"] != "fp-A" || d["amount"] != float64(10) {
		t.Fatalf("stored document %v", d)
	}
	err := orders.Insert(ctx, nil, "o-1", "fp-B", order{Amount: 99})
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Record.Fingerprint != "fp-A" || ce.Fingerprint != "fp-B" || ce.Key != (idem.Key{Scope: "orders", ID: "o-1"}) || !idem.IsPermanent(err) {
		t.Fatalf("conflicting insert = %v", err)
	}
	// Raw digest bytes as the fingerprint; the document as JSON bytes.
	raw := string([]byte{0, 0xff, 1})
	for i, want := range []error{nil, idem.ErrDuplicate} {
		if err := orders.Insert(ctx, nil, "o-raw", raw, []byte(`{"amount": 3, "orderId": "o-raw"}`)); !errors.Is(err, want) {
			t.Fatalf("insert %d with raw fingerprint bytes = %v, want %v", i, err, want)
		}
	}
}

// TestEntityBadInput: what Insert and Apply refuse, nothing written.
func TestEntityBadInput(t *testing.T) {
	coll := businessContainer(t, newClient(t))
	orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId"}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		e    *cosmos.Entities
		key  string
		doc  any
		want error
	}{
		{"empty key", orders, "", nil, idem.ErrNoKey},
		{"a slash in the key", orders, "a/b", nil, idem.ErrInvalidKey},
		{"a quote in the key", orders, `a"b`, nil, idem.ErrInvalidKey},
		{"a key of 256 bytes", orders, strings.Repeat("k", 256), nil, idem.ErrInvalidKey},
		{"a document with another id", orders, "k", map[string]any{"id": "other"}, idem.ErrInvalidData},
		{"a document in another partition", orders, "k", map[string]any{"orderId": "other"}, idem.ErrInvalidData},
		{"a document setting the fingerprint", orders, "k", map[string]any{"idemFingerprint": "x"}, idem.ErrInvalidData},
		{"not an object", orders, "k", []int{1, 2}, idem.ErrInvalidData},
		{"JSON that is not an object", orders, "k", []byte(`"text"`), idem.ErrInvalidData},
		{"a document over 2 MB", orders, "k", map[string]any{"blob": strings.Repeat("x", 3<<20)}, idem.ErrInvalidData},
		{"no container", &cosmos.Entities{PartitionKeyPath: "/orderId"}, "k", nil, idem.ErrInvalidOptions},
		{"no partition key path", &cosmos.Entities{Container: coll}, "k", nil, idem.ErrInvalidOptions},
		{"a nested partition key path", &cosmos.Entities{Container: coll, PartitionKeyPath: "/a/b"}, "k", nil, idem.ErrInvalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.e.Insert(ctx, nil, tc.key, "fp", tc.doc)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Insert = %v, want %v", err, tc.want)
			}
			if tc.want != idem.ErrInvalidOptions && !idem.IsPermanent(err) {
				t.Fatalf("Insert = %v: not permanent", err)
			}
		})
	}
	ships := &cosmos.Versioned{Container: coll, PartitionKeyPath: "/orderId"}
	for _, tc := range []struct {
		name    string
		version int64
		doc     any
	}{
		{"a document setting the version", 1, map[string]any{"version": 2}},
		{"a version beyond 2^53", 1<<53 + 1, nil},
	} {
		if err := ships.Apply(ctx, nil, "s", tc.version, tc.doc); !errors.Is(err, idem.ErrInvalidData) {
			t.Fatalf("Apply with %s = %v", tc.name, err)
		}
	}
	if ids := items(t, coll, "", ""); len(ids) != 0 {
		t.Fatalf("documents %v after refused writes", ids)
	}
}

// TestEntityInboxInsertRace: inserts of one order at once, each in a batch
// of its own (the create sent unread, first): one batch commits, the others
// meet 409, run again reading first, and are duplicates.
func TestEntityInboxInsertRace(t *testing.T) {
	coll := businessContainer(t, newClient(t))
	inbox, err := cosmos.NewEntityInbox(coll)
	if err != nil {
		t.Fatal(err)
	}
	orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId", Scope: "orders"}
	ctx := context.Background()
	inboxcheck.InsertRace(t, 4, 16, func(id string) error {
		return inbox.InTx(ctx, func(ctx context.Context, b *cosmos.Batch) error {
			if err := orders.Insert(ctx, b, id, "fp-A", order{Amount: 1}); err != nil {
				return err
			}
			b.CreateItem([]byte(fmt.Sprintf(`{"id": %q, "orderId": %q}`, id+"-line-1", id)), nil)
			return nil
		})
	})
	if ids := items(t, coll, "", ""); len(ids) != 8 {
		t.Fatalf("documents %v, want 4 orders and their lines", ids)
	}
}

// TestEntityInboxThroughGuard: 40 deliveries of 10 orders through
// idem.DoTx on an EntityInbox guard, each writing its order and a line in
// one batch: each order and line written once, 30 duplicates; a reuse with
// other content is a conflict, dead-lettered; two-phase calls are refused.
func TestEntityInboxThroughGuard(t *testing.T) {
	coll := businessContainer(t, newClient(t))
	inbox, err := cosmos.NewEntityInbox(coll)
	if err != nil {
		t.Fatal(err)
	}
	orders := &cosmos.Entities{Container: coll, PartitionKeyPath: "/orderId"}
	var counter idem.Counter
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "orders", Observer: &counter})
	if err != nil {
		t.Fatal(err)
	}
	insert := func(ctx context.Context, b *cosmos.Batch, id string, payload string) error {
		fp, _ := idem.PayloadFingerprint(idem.Message{Payload: []byte(payload)})
		if err := orders.Insert(ctx, b, id, fp, order{Amount: 5}); err != nil {
			return err
		}
		b.CreateItem([]byte(fmt.Sprintf(`{"id": %q, "orderId": %q, "line": true}`, id+"-line", id)), nil)
		return nil
	}
	inboxcheck.DeliveriesCommitted(t, g, &counter, 40, 10, func(ctx context.Context, b *cosmos.Batch, id string) error {
		return insert(ctx, b, id, id)
	}, func(id string) int { return len(items(t, coll, id, "NOT IS_DEFINED(c.line)")) })
	if ids := items(t, coll, "", ""); len(ids) != 20 {
		t.Fatalf("documents %v, want 10 orders and 10 lines", ids)
	}
	ctx := context.Background()
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "p-1", Payload: []byte("other")}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
		return nil, insert(ctx, b, "p-1", "other")
	})
	var ce *idem.ConflictError
	if res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter || !errors.As(err, &ce) || ce.Key.Scope != "orders" {
		t.Fatalf("conflict through the guard = %v, %v", res.Outcome, err)
	}
	inboxcheck.NotAStore[*cosmos.Batch](t, inbox)
	inboxcheck.Refuses(t, g, idem.Message{ID: "p-2", Payload: []byte("p-2")})
	if ids := items(t, coll, "", ""); len(ids) != 20 {
		t.Fatalf("documents %v after the conflict and the refused calls, want 20", ids)
	}
}

// TestVersionGuard: 40 versions of one shipment applied at once in random
// order, half directly and half through a guard's batch, end at the
// newest; an equal version is superseded.
func TestVersionGuard(t *testing.T) {
	coll := businessContainer(t, newClient(t))
	ships := &cosmos.Versioned{Container: coll, PartitionKeyPath: "/orderId"}
	inbox, err := cosmos.NewEntityInbox(coll)
	if err != nil {
		t.Fatal(err)
	}
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "ships"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const versions = 40
	inboxcheck.VersionRace(t, versions, func(ver int64) error {
		doc := map[string]any{"status": fmt.Sprintf("status-%d", ver)}
		if ver%2 == 0 {
			return ships.Apply(ctx, nil, "s-1", ver, doc)
		}
		res, err := idem.DoTx(ctx, g, idem.Message{ID: fmt.Sprintf("v%d", ver)}, func(ctx context.Context, b *cosmos.Batch) ([]byte, error) {
			return nil, ships.Apply(ctx, b, "s-1", ver, doc)
		})
		if err == nil && res.Outcome == idem.OutcomeSuperseded {
			return idem.ErrSuperseded
		}
		return err
	}, func() int64 {
		d := readDoc(t, coll, "s-1")
		if d["status"] != fmt.Sprintf("status-%v", d["version"]) {
			t.Errorf("document %v: the status of another version", d)
		}
		v, _ := d["version"].(float64)
		return int64(v)
	})
	if err := ships.Apply(ctx, nil, "s-1", versions, map[string]any{"status": "again"}); !errors.Is(err, idem.ErrSuperseded) {
		t.Fatalf("equal version = %v", err)
	}
}
