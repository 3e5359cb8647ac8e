package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ferretdbtest"
	"github.com/idemgo/idem/internal/testenv"
	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/storetest"
)

var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var collSeq atomic.Int64

// newClient connects to the test server (or skips) and disconnects at the
// end of the test.
func newClient(t testing.TB) *mongo.Client {
	t.Helper()
	uri := ferretdbtest.URI(t)
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetMaxPoolSize(64))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Disconnect(context.Background()) })
	return c
}

// testDB is the database the tests write to: one per run, dropped by
// TestMain (on FerretDB over SQLite a database is a file, and a fresh one
// keeps each run as fast as the first).
func testDB(c *mongo.Client) *mongo.Database { return c.Database("idemtest_" + runID) }

func TestMain(m *testing.M) {
	code := m.Run()
	// The embedded server's files go with it; a server of IDEM_MONGO_URL
	// keeps them, so the run's database is dropped.
	if c, err := mongo.Connect(options.Client().ApplyURI(testenv.Mongo.Addr()).SetServerSelectionTimeout(2 * time.Second)); err == nil && !ferretdbtest.Embedded() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = testDB(c).Drop(ctx)
		_ = c.Disconnect(ctx)
		cancel()
	}
	ferretdbtest.Stop()
	os.Exit(code)
}

// uniqueCollection returns a collection name no other test (or run) uses.
func uniqueCollection() string {
	return "t_" + runID + "_" + strconv.FormatInt(collSeq.Add(1), 10)
}

// newStore returns a migrated store on a fresh collection, dropped at the
// end of the test.
func newStore(t testing.TB, c *mongo.Client, opts mongoidem.Options) *mongoidem.Store {
	t.Helper()
	if opts.Collection == "" {
		opts.Collection = uniqueCollection()
	}
	s, err := mongoidem.New(testDB(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Drop(context.Background()); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	c := newClient(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, c, mongoidem.Options{}) })
}

func TestConformanceWithoutTTL(t *testing.T) {
	c := newClient(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, c, mongoidem.Options{TTLIndex: mongoidem.TTLNone}) })
}

func TestConformanceInspector(t *testing.T) {
	c := newClient(t)
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, c, mongoidem.Options{}) })
}

// TestTransactionalInbox runs the inbox suite where the server has
// multi-document transactions (a replica set). Elsewhere (FerretDB v1, a
// standalone MongoDB) it checks that the store says so: a typed error at the
// first use, nothing run, nothing written.
func TestTransactionalInbox(t *testing.T) {
	c := newClient(t)
	probe := newStore(t, c, mongoidem.Options{})
	ctx := context.Background()
	err := probe.SupportsTransactions(ctx)
	if err == nil {
		storetest.RunTx(t, func(t *testing.T) storetest.TxStore[*mongo.Session] { return newStore(t, c, mongoidem.Options{}) })
		return
	}
	var nte *mongoidem.NoTransactionsError
	if !errors.As(err, &nte) {
		t.Fatalf("SupportsTransactions: %v; want nil or a *NoTransactionsError", err)
	}
	t.Logf("no transactions on this server (%s): the inbox suite does not run; checking the typed error", nte.Server)
	s := newStore(t, c, mongoidem.Options{})
	g, err := idem.New(s, idem.Options{Scope: "inbox"})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	res, err := idem.DoTx(ctx, g, idem.Message{ID: "m1", Payload: []byte("x")}, func(ctx context.Context, tx *mongo.Session) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if ran {
		t.Fatal("DoTx ran the handler on a server without transactions")
	}
	if !errors.Is(err, mongoidem.ErrNoTransactions) || !errors.Is(err, idem.ErrNoTx) || !errors.As(err, &nte) {
		t.Fatalf("DoTx = %v, %v; want a *NoTransactionsError (ErrNoTransactions, idem.ErrNoTx)", res.Outcome, err)
	}
	if a := idem.Decide(res, err); a != idem.ActionDeadLetter {
		t.Fatalf("DoTx's action = %v; want dead-letter (retrying cannot help)", a)
	}
	if _, err := s.Get(ctx, idem.Key{Scope: "inbox", ID: "m1"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a marker was written: %v", err)
	}
	// The answer is kept: the second use costs no probe, and says the same.
	if err := s.InTx(ctx, func(context.Context, *mongo.Session) error { t.Fatal("InTx ran fn"); return nil }); !errors.As(err, &nte) {
		t.Fatalf("second InTx = %v", err)
	}
}

func TestNewValidatesNames(t *testing.T) {
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/").SetServerSelectionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(context.Background())
	s, err := mongoidem.New(c.Database("app"), mongoidem.Options{})
	if err != nil || s.Collection().Name() != mongoidem.DefaultCollection {
		t.Fatalf("zero Options: %v", err)
	}
	for _, name := range []string{"a b", "a$b", "a/b", "system.x", ".x", "x.", "a..b", "a\x00b", string(make([]byte, 101))} {
		if _, err := mongoidem.New(c.Database("app"), mongoidem.Options{Collection: name}); !errors.Is(err, mongoidem.ErrInvalidName) || !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("collection %q: %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"a.b", "a/b", "a b", "", "a$", string(make([]byte, 64))} {
		if _, err := mongoidem.New(c.Database(name), mongoidem.Options{}); !errors.Is(err, mongoidem.ErrInvalidName) {
			t.Errorf("database %q: %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"idem_records", "billing.inbox", "app-v2_x"} {
		if _, err := mongoidem.New(c.Database("app"), mongoidem.Options{Collection: name}); err != nil {
			t.Errorf("collection %q: %v", name, err)
		}
	}
	if _, err := mongoidem.New(nil, mongoidem.Options{}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("nil database: %v", err)
	}
	if _, err := mongoidem.New(c.Database("app"), mongoidem.Options{TTLIndex: 7}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("TTLIndex 7: %v", err)
	}
}
