package cosmostest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// newServer starts a server and a client of it, both closed at the end.
func newServer(t *testing.T) (*cosmostest.Server, *azcosmos.Client) {
	t.Helper()
	return newServerWith(t, cosmostest.Options{})
}

// frozen is a clock that stands still (Advance moves the server's).
func frozen() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }

func newServerWith(t *testing.T, opts cosmostest.Options) (*cosmostest.Server, *azcosmos.Client) {
	t.Helper()
	srv, err := cosmostest.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// newContainer creates database "db" (when absent) and a container in it.
func newContainer(t *testing.T, c *azcosmos.Client, props azcosmos.ContainerProperties) *azcosmos.ContainerClient {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); err != nil && status(err) != http.StatusConflict {
		t.Fatalf("CreateDatabase: %v", err)
	}
	db, err := c.NewDatabase("db")
	if err != nil {
		t.Fatal(err)
	}
	if props.PartitionKeyDefinition.Paths == nil {
		props.PartitionKeyDefinition = azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}
	}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		t.Fatalf("CreateContainer(%s): %v", props.ID, err)
	}
	cc, err := db.NewContainer(props.ID)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// status is the HTTP status of a failed request, 0 for other errors.
func status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// wantStatus fails t unless err is a response error with the status and
// (when given) a message containing text.
func wantStatus(t *testing.T, what string, err error, want int, text string) {
	t.Helper()
	if got := status(err); got != want {
		t.Fatalf("%s: %v (status %d); want status %d", what, err, got, want)
	}
	if text != "" && !strings.Contains(err.Error(), text) {
		t.Fatalf("%s: %v; want it to say %q", what, err, text)
	}
}

// doc encodes an item.
func doc(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode decodes an item the server returned.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return m
}

var ctx = context.Background()

func pk(s string) azcosmos.PartitionKey { return azcosmos.NewPartitionKeyString(s) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
