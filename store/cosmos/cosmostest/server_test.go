package cosmostest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// The account read, and databases and containers created, read, replaced
// and deleted through the client.
func TestDatabasesAndContainers(t *testing.T) {
	_, c := newServer(t)
	if _, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	_, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	wantStatus(t, "CreateDatabase again", err, http.StatusConflict, "already exists")
	db, _ := c.NewDatabase("db")
	if r, err := db.Read(ctx, nil); err != nil || r.DatabaseProperties.ID != "db" {
		t.Fatalf("database Read: %+v, %v", r.DatabaseProperties, err)
	}
	missing, _ := c.NewDatabase("nope")
	_, err = missing.Read(ctx, nil)
	wantStatus(t, "Read of a missing database", err, http.StatusNotFound, "")

	ttl := int32(-1)
	props := azcosmos.ContainerProperties{ID: "orders", DefaultTimeToLive: &ttl,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/orderId"}}}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	_, err = db.CreateContainer(ctx, props, nil)
	wantStatus(t, "CreateContainer again", err, http.StatusConflict, "")
	cc, _ := db.NewContainer("orders")
	r, err := cc.Read(ctx, nil)
	if err != nil {
		t.Fatalf("container Read: %v", err)
	}
	got := r.ContainerProperties
	if got.ID != "orders" || len(got.PartitionKeyDefinition.Paths) != 1 || got.PartitionKeyDefinition.Paths[0] != "/orderId" ||
		got.DefaultTimeToLive == nil || *got.DefaultTimeToLive != -1 || got.IndexingPolicy == nil {
		t.Fatalf("container properties = %+v", got)
	}

	ten := int32(10)
	got.DefaultTimeToLive = &ten
	if r, err := cc.Replace(ctx, *got, nil); err != nil || *r.ContainerProperties.DefaultTimeToLive != 10 {
		t.Fatalf("Replace with a default TTL: %v", err)
	}
	moved := *got
	moved.PartitionKeyDefinition = azcosmos.PartitionKeyDefinition{Paths: []string{"/other"}}
	_, err = cc.Replace(ctx, moved, nil)
	wantStatus(t, "Replace with another partition key", err, http.StatusBadRequest, "cannot change")

	if _, err := cc.Delete(ctx, nil); err != nil {
		t.Fatalf("container Delete: %v", err)
	}
	_, err = cc.Read(ctx, nil)
	wantStatus(t, "Read of a deleted container", err, http.StatusNotFound, "")
	if _, err := db.Delete(ctx, nil); err != nil {
		t.Fatalf("database Delete: %v", err)
	}
}

// Requests signed with another key, and a connection string with the
// right one.
func TestMasterKeyAuthorization(t *testing.T) {
	srv, _ := newServer(t)
	wrong, err := azcosmos.NewKeyCredential("d3Jvbmcga2V5")
	if err != nil {
		t.Fatal(err)
	}
	c, err := azcosmos.NewClientWithKey(srv.URL(), wrong, srv.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	if err == nil {
		t.Fatal("a request signed with the wrong key succeeded")
	}
	// The client's first request is its account read, whose failure it
	// reports as text.
	if !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "wrong key") {
		t.Fatalf("wrong key: %v; want 401 Unauthorized", err)
	}

	good, err := azcosmos.NewClientFromConnectionString(srv.ConnectionString(), srv.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil); err != nil {
		t.Fatalf("connection string client: %v", err)
	}
	if srv.Key() != cosmostest.EmulatorKey {
		t.Fatalf("default key %q, want the emulator's", srv.Key())
	}
}

// A bad key in Options is refused at NewServer.
func TestBadKeyOption(t *testing.T) {
	if _, err := cosmostest.NewServer(cosmostest.Options{Key: "not base64!"}); err == nil {
		t.Fatal("NewServer accepted a key that is not base64")
	}
}

// A client that trusts the PEM of CertificatePEM alone reaches the
// account; one that trusts only the system's roots does not.
func TestCertificatePEM(t *testing.T) {
	srv, _ := newServer(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(srv.CertificatePEM()) {
		t.Fatalf("CertificatePEM is no PEM certificate: %q", srv.CertificatePEM())
	}
	for _, tc := range []struct {
		name  string
		roots *x509.CertPool
		ok    bool
	}{{"trusting the PEM", pool, true}, {"trusting the system's roots", nil, false}} {
		cred, err := azcosmos.NewKeyCredential(srv.Key())
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.roots}}}
		c, err := azcosmos.NewClientWithKey(srv.URL(), cred, &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: hc, Retry: policy.RetryOptions{MaxRetries: -1}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "pem"}, nil)
		// azcosmos reports the failed account read in text, not the
		// *tls.CertificateVerificationError.
		if tc.ok && err != nil && status(err) != http.StatusConflict || !tc.ok && (err == nil || !strings.Contains(err.Error(), "certificate")) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
