package cosmos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// account is a real Cosmos DB account or emulator at IDEM_COSMOS_URL, with
// its key in IDEM_COSMOS_KEY (default: the emulator's). Unset, the tests
// run on an in-process cosmostest server.
var account = testenv.Service{Name: "Azure Cosmos DB", Env: "IDEM_COSMOS_URL", Default: "https://127.0.0.1:8081/",
	Start: "unset IDEM_COSMOS_URL to use the in-process cosmostest server, or run the Cosmos DB emulator (its certificate trusted) and set IDEM_COSMOS_URL=https://127.0.0.1:8081/"}

var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

var (
	serverOnce sync.Once
	server     *cosmostest.Server
	serverErr  error
	seq        atomic.Int64
	// usedAccount is set once a test reached the account of
	// IDEM_COSMOS_URL: TestMain then deletes the run's database there.
	usedAccount atomic.Bool
)

// inProcess reports whether the tests run on cosmostest.
func inProcess() bool { return os.Getenv(account.Env) == "" }

// testServer is the process's cosmostest server, started on first use.
func testServer(t testing.TB) *cosmostest.Server {
	t.Helper()
	serverOnce.Do(func() { server, serverErr = cosmostest.NewServer(cosmostest.Options{}) })
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return server
}

// needServer skips t unless it runs on cosmostest (a test of what only the
// in-process server can do: move its clock, throttle on demand).
func needServer(t testing.TB) *cosmostest.Server {
	t.Helper()
	if !inProcess() {
		t.Skip("needs the in-process cosmostest server (IDEM_COSMOS_URL is set)")
	}
	return testServer(t)
}

// ownStore returns a migrated store on a cosmostest server of tb's own
// (skipping tb where the tests run on IDEM_COSMOS_URL's account): its
// clock, throttling and request-unit totals are tb's alone.
func ownStore(tb testing.TB, opts cosmostest.Options) (*cosmostest.Server, *cosmos.Store) {
	tb.Helper()
	srv, c := ownAccount(tb, opts)
	return srv, newStore(tb, c, cosmos.Options{})
}

// ownAccount returns a cosmostest server of tb's own and a client of it
// (skipping tb where the tests run on IDEM_COSMOS_URL's account).
func ownAccount(tb testing.TB, opts cosmostest.Options) (*cosmostest.Server, *azcosmos.Client) {
	tb.Helper()
	if !inProcess() {
		tb.Skip("needs an in-process cosmostest server of its own (IDEM_COSMOS_URL is set)")
	}
	srv, err := cosmostest.NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	c, err := srv.NewClient()
	if err != nil {
		tb.Fatal(err)
	}
	return srv, c
}

// newClient returns a client of the test account.
func newClient(t testing.TB) *azcosmos.Client {
	t.Helper()
	if inProcess() {
		c, err := testServer(t).NewClient()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	url := account.Need(t)
	usedAccount.Store(true)
	key := os.Getenv("IDEM_COSMOS_KEY")
	if key == "" {
		key = cosmostest.EmulatorKey
	}
	cred, err := azcosmos.NewKeyCredential(key)
	if err != nil {
		t.Fatalf("IDEM_COSMOS_KEY: %v", err)
	}
	c, err := azcosmos.NewClientWithKey(url, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testDatabase is the database the tests write to: one per run, deleted by
// TestMain.
func testDatabase() string { return "idemtest_" + runID }

func TestMain(m *testing.M) {
	code := m.Run()
	if inProcess() {
		if server != nil {
			server.Close()
		}
	} else if c := clientForCleanup(); c != nil && usedAccount.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if db, err := c.NewDatabase(testDatabase()); err == nil {
			_, _ = db.Delete(ctx, nil)
		}
		cancel()
	}
	os.Exit(code)
}

func clientForCleanup() *azcosmos.Client {
	key := os.Getenv("IDEM_COSMOS_KEY")
	if key == "" {
		key = cosmostest.EmulatorKey
	}
	cred, err := azcosmos.NewKeyCredential(key)
	if err != nil {
		return nil
	}
	c, err := azcosmos.NewClientWithKey(account.Addr(), cred, nil)
	if err != nil {
		return nil
	}
	return c
}

// uniqueContainer returns a container name no other test (or run) uses.
func uniqueContainer() string { return "t_" + runID + "_" + strconv.FormatInt(seq.Add(1), 10) }

// newStore returns a migrated store on a fresh container, dropped at the
// end of the test.
func newStore(t testing.TB, c *azcosmos.Client, opts cosmos.Options) *cosmos.Store {
	t.Helper()
	if opts.Database == "" {
		opts.Database = testDatabase()
	}
	if opts.Container == "" {
		opts.Container = uniqueContainer()
	}
	s, err := cosmos.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Drop(context.Background()); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	return s
}

// businessContainer returns a fresh container of business documents
// partitioned by /orderId, with a default time to live of -1 (items'
// own ttl counts), deleted at the end of the test.
func businessContainer(t testing.TB, c *azcosmos.Client) *azcosmos.ContainerClient {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: testDatabase()}, nil); err != nil && !isConflict(err) {
		t.Fatal(err)
	}
	db, err := c.NewDatabase(testDatabase())
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueContainer()
	ttl := int32(-1)
	if _, err := db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     name,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Kind: azcosmos.PartitionKeyKindHash, Paths: []string{"/orderId"}, Version: 2},
		DefaultTimeToLive:      &ttl,
	}, nil); err != nil {
		t.Fatal(err)
	}
	coll, err := db.NewContainer(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := coll.Delete(context.Background(), nil); err != nil {
			t.Errorf("delete container %s: %v", name, err)
		}
	})
	return coll
}

func isConflict(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusConflict
}

// items returns the ids of the container's items in partition pk ("":
// every partition) that match where ("": all), a condition on c.
func items(t testing.TB, coll *azcosmos.ContainerClient, pk, where string) []string {
	t.Helper()
	q := "SELECT c.id FROM c"
	if where != "" {
		q += " WHERE " + where
	}
	key := azcosmos.NewPartitionKey()
	if pk != "" {
		key = azcosmos.NewPartitionKeyString(pk)
	}
	var ids []string
	pager := coll.NewQueryItemsPager(q, key, nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			var d struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(it, &d); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
	}
	return ids
}
