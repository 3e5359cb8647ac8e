package dsn

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/cosmos/cosmostest"
)

// cosmosAccount returns the DSN of an in-process account for t, the
// database and container given.
func cosmosAccount(t *testing.T) string {
	t.Helper()
	d, stop, err := InProcessCosmos(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return d + "&database=app&container=inbox"
}

// A cosmos:// DSN opens the store on the account: before migrate the
// probe says to migrate (naming the container), after it the schema is
// whole and records go in; a wrong key is a refused login, the key never
// shown.
func TestCosmos(t *testing.T) {
	ctx := context.Background()
	d := cosmosAccount(t)
	h, err := Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Scheme != "cosmos" || h.Name != "Azure Cosmos DB" || h.Cosmos == nil || h.Where != "database app, container inbox" {
		t.Fatalf("handle %+v", h)
	}
	if _, ok := h.Native.(*cosmos.Store); !ok {
		t.Fatalf("Native is %T", h.Native)
	}
	if err := h.Ping(ctx); err != nil {
		t.Fatalf("ping before migrate: %v", err)
	}
	if err := h.Probe(ctx); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "has no container inbox yet") ||
		!strings.Contains(err.Error(), "idem migrate --store '"+d+"'") {
		t.Fatalf("probe before migrate: %v", err)
	}
	if err := h.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Probe(ctx); err != nil {
		t.Fatalf("probe after migrate: %v", err)
	}
	k := idem.Key{Scope: "s", ID: "k"}
	now := time.Now()
	if c, err := h.Store.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(60e9), ExpiresAt: now.Add(3600e9)}); err != nil || c.Outcome != idem.ClaimAcquired {
		t.Fatalf("claim: %v %v", c.Outcome, err)
	}

	for _, bad := range []string{d + "&key=c2VjcmV0LWtleS1vZi1hbm90aGVyLWFjY291bnQ=", SetParam(d, "database", "app") + "&key=aGlkZGVuLXNlY3JldC1rZXk%3D"} {
		g, err := Open(ctx, bad)
		if err != nil {
			t.Fatal(err)
		}
		err = g.Ping(ctx)
		g.Close()
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "check the account key") {
			t.Errorf("ping with a wrong key: %v; want ErrAuth", err)
		}
		for _, secret := range []string{"c2VjcmV0LWtleS", "aGlkZGVuLXNlY3JldC1rZXk"} {
			if strings.Contains(err.Error(), secret) || strings.Contains(g.Redacted, secret) {
				t.Errorf("the key is shown: %v / %s", err, g.Redacted)
			}
		}
	}
}

// A cosmos:// DSN without ?ca= does not trust the emulator's (here the
// test server's) self-signed certificate, and says how to.
func TestCosmosUntrustedCertificate(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(cosmosAccount(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("ca")
	u.RawQuery = q.Encode()
	d := u.String()
	h, err := Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Ping(ctx); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "?ca=FILE") {
		t.Fatalf("ping: %v; want ErrUnreachable with the advice to pass ?ca=", err)
	}
}

func TestCosmosKeyDefaults(t *testing.T) {
	for _, tc := range []struct {
		env, dsn string
		want     string
	}{
		{"", "cosmos://127.0.0.1:8081", cosmostest.EmulatorKey},
		{"ZW52LWtleQ==", "cosmos://127.0.0.1:8081", "ZW52LWtleQ=="},
		// A key pasted unescaped: its + decoded as a space, put back.
		{"ZW52LWtleQ==", "cosmos://h?key=a+b/c==", "a+b/c=="},
	} {
		t.Setenv(CosmosKeyEnv, tc.env)
		u, err := url.Parse(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := cosmosKey(u.Query()); got != tc.want {
			t.Errorf("%s with $%s=%q: key %q, want %q", tc.dsn, CosmosKeyEnv, tc.env, got, tc.want)
		}
	}
}
