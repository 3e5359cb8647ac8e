package dsn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

func init() {
	register("cosmos", openCosmos)
	storeNames["cosmos"] = "Azure Cosmos DB"
	startHints["cosmos"] = "the Cosmos DB emulator (docker run -d -p 8081:8081 mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator, " +
		"its certificate passed as ?ca=FILE), or name your account: cosmos://ACCOUNT.documents.azure.com?key=KEY"
}

// CosmosKeyEnv is the environment variable a cosmos:// DSN without ?key=
// takes the account key from; without either, the key is the emulator's
// well-known one.
const CosmosKeyEnv = "IDEM_COSMOS_KEY"

// cosmosParams are the parameters a cosmos:// DSN takes.
var cosmosParams = map[string]bool{"key": true, "database": true, "container": true, "ca": true}

// openCosmos opens cosmos://HOST[:PORT][?key=K&database=D&container=C&ca=FILE]:
// the account endpoint https://HOST:PORT/ (port 443 when left out), the
// account key (else $IDEM_COSMOS_KEY, else the emulator's), the records'
// database and container (default idem and idem_records), and a PEM file
// of certificates to trust beside the system's (the emulator's
// self-signed one). Nothing is contacted until the first request.
func openCosmos(_ context.Context, u *url.URL, raw string) (*Handle, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadDSN, Redact(raw), fmt.Sprintf(format, args...))
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, bad("name the account's host, e.g. cosmos://ACCOUNT.documents.azure.com?key=KEY or cosmos://127.0.0.1:8081 (the emulator)")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
		return nil, bad("a cosmos:// DSN is the host and parameters only: cosmos://HOST[:PORT]?key=KEY&database=D&container=C")
	}
	q := u.Query()
	for k := range q {
		if !cosmosParams[k] {
			return nil, bad("unknown parameter %q (cosmos takes key, database, container and ca)", k)
		}
	}
	key := cosmosKey(q)
	if b, err := base64.StdEncoding.DecodeString(key); err != nil || len(b) == 0 {
		return nil, bad("key is not a base64 account key (the portal's Keys page; escape + / = as %%2B %%2F %%3D, or set %s)", CosmosKeyEnv)
	}
	cred, err := azcosmos.NewKeyCredential(key)
	if err != nil {
		return nil, bad("key: %v", err)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	endpoint := "https://" + net.JoinHostPort(u.Hostname(), port) + "/"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ca := q.Get("ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, bad("ca: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad("ca: %s holds no PEM certificate", ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := &http.Client{Transport: tr}
	client, err := azcosmos.NewClientWithKey(endpoint, cred, &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: hc,
		// A command reports an account that does not answer, with a
		// hint, rather than retrying it for a minute.
		Retry: policy.RetryOptions{MaxRetries: 2, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second},
	}})
	if err != nil {
		return nil, bad("%v", err)
	}
	opts := cosmos.Options{Database: q.Get("database"), Container: q.Get("container")}
	s, err := cosmos.New(client, opts)
	if err != nil {
		return nil, bad("%v", err)
	}
	db, container := opts.Database, s.Container().ID()
	if db == "" {
		db = cosmos.DefaultDatabase
	}
	return &Handle{Store: s, Native: s, Migrate: s.Migrate, Cosmos: client,
		Close: func() error { tr.CloseIdleConnections(); return nil },
		Where: "database " + db + ", container " + container,
		table: container, tableGiven: opts.Container != "",
		schema: s.CheckSchema,
		ping:   func(ctx context.Context) error { return cosmosPing(ctx, client, db) },
	}, nil
}

// InProcessCosmos starts an in-process Cosmos DB account (cosmostest: the
// real azcosmos client over HTTPS) and returns a cosmos:// DSN of it: its
// certificate written in dir as ?ca=, the emulator's key (the account's)
// the DSN's default. stop closes the account; dir is the caller's.
func InProcessCosmos(dir string) (dsn string, stop func(), err error) {
	srv, err := cosmostest.NewServer(cosmostest.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("in-process Cosmos DB: %w", err)
	}
	ca := filepath.Join(dir, "cosmostest.pem")
	if err := os.WriteFile(ca, srv.CertificatePEM(), 0o600); err != nil {
		srv.Close()
		return "", nil, err
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL(), "https://"), "/")
	return "cosmos://" + host + "?ca=" + ca, srv.Close, nil
}

// cosmosKey is the account key of a DSN's parameters q: ?key=, else
// $IDEM_COSMOS_KEY, else the emulator's.
func cosmosKey(q url.Values) string {
	key := q.Get("key")
	if key == "" {
		key = os.Getenv(CosmosKeyEnv)
	}
	if key == "" {
		key = cosmostest.EmulatorKey
	}
	// A key pasted into a URL unescaped has its '+' read as a space; base64
	// has no spaces, so they were pluses.
	return strings.ReplaceAll(key, " ", "+")
}

// cosmosPing reads the records' database: an answer, found or not, says
// the account answers and takes the key.
func cosmosPing(ctx context.Context, c *azcosmos.Client, db string) error {
	d, err := c.NewDatabase(db)
	if err != nil {
		return err
	}
	if _, err := d.Read(ctx, nil); err != nil && statusCode(err) != http.StatusNotFound {
		return err
	}
	return nil
}
