package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/inboxcheck"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// entityColl returns a fresh collection, dropped at the end of the test.
func entityColl(t *testing.T, c *mongo.Client) *mongo.Collection {
	t.Helper()
	coll := testDB(c).Collection(uniqueCollection())
	t.Cleanup(func() { coll.Drop(context.Background()) })
	return coll
}

func count(t *testing.T, coll *mongo.Collection) int64 {
	t.Helper()
	n, err := coll.CountDocuments(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEntityInsert: 24 deliveries of each order at once: one document is
// inserted, the others are duplicates; other content under a taken key is a
// conflict carrying the stored fingerprint.
func TestEntityInsert(t *testing.T) {
	c := newClient(t)
	orders := &mongoidem.Entities{Collection: entityColl(t, c), Scope: "orders"}
	ctx := context.Background()
	inboxcheck.InsertRace(t, 5, 24, func(id string) error {
		return orders.Insert(ctx, id, "fp-A", bson.D{{Key: "amount", Value: 10}})
	})
	if n := count(t, orders.Collection); n != 5 {
		t.Fatalf("%d documents, want 5", n)
	}
	err := orders.Insert(ctx, "o-1", "fp-B", bson.D{{Key: "amount", Value: 99}})
	var ce *idem.ConflictError
	if !errors.As(err, &ce) || ce.Record.Fingerprint != "fp-A" || ce.Fingerprint != "fp-B" || ce.Key.ID != "o-1" {
		t.Fatalf("conflicting insert = %v", err)
	}
	// A struct document, and raw digest bytes as the fingerprint.
	type order struct {
		Amount int    `bson:"amount"`
		Note   string `bson:"note"`
	}
	raw := string([]byte{0, 0xff, 1})
	if err := orders.Insert(ctx, "o-struct", raw, order{Amount: 3, Note: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := orders.Insert(ctx, "o-struct", raw, order{Amount: 3, Note: "x"}); !errors.Is(err, idem.ErrDuplicate) {
		t.Fatalf("second insert with raw fingerprint bytes = %v; want duplicate", err)
	}
}

func TestEntityBadInput(t *testing.T) {
	c := newClient(t)
	orders := &mongoidem.Entities{Collection: entityColl(t, c), Scope: "orders"}
	ctx := context.Background()
	if err := orders.Insert(ctx, "", "fp", nil); !errors.Is(err, idem.ErrNoKey) {
		t.Fatalf("empty key = %v", err)
	}
	if err := orders.Insert(ctx, "k", "fp", bson.D{{Key: "_id", Value: "other"}}); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("document with its own _id = %v", err)
	}
	if err := orders.Insert(ctx, "k", "fp", bson.D{{Key: "blob", Value: make([]byte, 17<<20)}}); !errors.Is(err, idem.ErrInvalidData) || !idem.IsPermanent(err) {
		t.Fatalf("17 MiB document = %v; want ErrInvalidData", err)
	}
	if n := count(t, orders.Collection); n != 0 {
		t.Fatalf("%d documents after refused inserts", n)
	}
	if err := (&mongoidem.Entities{}).Insert(ctx, "k", "", nil); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Fatalf("no collection = %v", err)
	}
}

// TestEntityThroughGuard: 40 deliveries of 10 payments through idem.DoTx on
// an EntityInbox guard: each payment inserted once, 30 duplicates, a reuse
// with other content dead-lettered; two-phase calls are refused.
func TestEntityThroughGuard(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	inbox, err := mongoidem.NewEntityInbox(testDB(c), mongoidem.EntityInboxOptions{NoTransaction: noTransactions(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	payments := &mongoidem.Entities{Collection: entityColl(t, c), Scope: "payments"}
	var counter idem.Counter
	g, err := idem.NewInbox(inbox, idem.Options{Scope: "payments", Observer: &counter})
	if err != nil {
		t.Fatal(err)
	}
	inboxcheck.Deliveries(t, g, &counter, 40, 10, func(ctx context.Context, _ *mongo.Session, id string) error {
		fp, _ := idem.PayloadFingerprint(idem.Message{Payload: []byte(id)})
		return payments.Insert(ctx, id, fp, bson.D{{Key: "amount", Value: 5}})
	})
	if n := count(t, payments.Collection); n != 10 {
		t.Fatalf("payments %d, want 10", n)
	}
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "p-1", Payload: []byte("p-1")}, func(ctx context.Context, _ *mongo.Session) ([]byte, error) {
		return nil, payments.Insert(ctx, "p-1", "other content", nil)
	})
	if res.Outcome != idem.OutcomeConflict || idem.Decide(res, err) != idem.ActionDeadLetter {
		t.Fatalf("conflict through the guard = %v, %v", res.Outcome, err)
	}
	// Two-phase work on this guard would deduplicate nothing: the inbox
	// is no idem.Store, and the guard refuses Do, DoKey and ClaimBatch
	// without running the handler.
	inboxcheck.NotAStore[*mongo.Session](t, inbox)
	inboxcheck.Refuses(t, g, idem.Message{ID: "p-2", Payload: []byte("p-2")})
	if n := count(t, payments.Collection); n != 10 {
		t.Fatalf("payments %d after the refused calls, want 10", n)
	}
}

// TestEntityInboxWithoutTransactions: where the server has none, an
// EntityInbox that asks for transactions says so at its first use.
func TestEntityInboxWithoutTransactions(t *testing.T) {
	c := newClient(t)
	if !noTransactions(t, c) {
		t.Skip("the server has transactions")
	}
	inbox, err := mongoidem.NewEntityInbox(testDB(c), mongoidem.EntityInboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = inbox.InTx(context.Background(), func(context.Context, *mongo.Session) error {
		t.Fatal("ran without a transaction")
		return nil
	})
	var nte *mongoidem.NoTransactionsError
	if !errors.As(err, &nte) || !idem.IsPermanent(err) {
		t.Fatalf("InTx = %v; want a *NoTransactionsError", err)
	}
}

// noTransactions reports whether the test server lacks transactions.
func noTransactions(t *testing.T, c *mongo.Client) bool {
	t.Helper()
	s, err := mongoidem.New(testDB(c), mongoidem.Options{Collection: "idem_txprobe"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.SupportsTransactions(context.Background())
	var nte *mongoidem.NoTransactionsError
	if err != nil && !errors.As(err, &nte) {
		t.Fatal(err)
	}
	return err != nil
}

// TestVersionGuard: 40 versions of one shipment applied at once in random
// order end at the newest; an equal version is superseded.
func TestVersionGuard(t *testing.T) {
	c := newClient(t)
	ships := &mongoidem.Versioned{Collection: entityColl(t, c)}
	ctx := context.Background()
	const versions = 40
	var (
		wg                  sync.WaitGroup
		mu                  sync.Mutex
		applied, superseded int
	)
	for _, v := range rand.Perm(versions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ver := int64(v + 1)
			err := ships.Apply(ctx, "s-1", ver, bson.D{{Key: "status", Value: fmt.Sprintf("status-%d", ver)}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				applied++
			case errors.Is(err, idem.ErrSuperseded):
				superseded++
			default:
				t.Errorf("Apply(v%d): %v", ver, err)
			}
		}()
	}
	wg.Wait()
	var doc struct {
		Version int64  `bson:"version"`
		Status  string `bson:"status"`
	}
	if err := ships.Collection.FindOne(ctx, bson.D{{Key: "_id", Value: "s-1"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.Version != versions || doc.Status != fmt.Sprintf("status-%d", versions) || applied+superseded != versions || applied < 1 {
		t.Fatalf("ended at v%d %q; applied %d superseded %d", doc.Version, doc.Status, applied, superseded)
	}
	if err := ships.Apply(ctx, "s-1", versions, bson.D{{Key: "status", Value: "again"}}); !errors.Is(err, idem.ErrSuperseded) {
		t.Fatalf("equal version = %v", err)
	}
	if err := ships.Apply(ctx, "s-1", versions+1, bson.D{{Key: "version", Value: 1}}); !errors.Is(err, idem.ErrInvalidData) {
		t.Fatalf("an update setting the version field itself = %v", err)
	}
}
