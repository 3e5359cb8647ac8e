package dsn

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem"
)

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		dsn  string
		is   error
		want string
	}{
		{"", ErrBadDSN, "IDEM_STORE"},
		{"idem.db", ErrBadDSN, "has no scheme"},
		{"mongodb://localhost", ErrUnknownScheme, "available: memory://"},
		{"sqlite://", ErrBadDSN, "name the database file"},
		{"sqlite://x.db?sync=sometimes", ErrBadDSN, "sync"},
		{"sqlite://x.db?tabel=t", ErrBadDSN, `unknown parameter "tabel"`},
		{"sqlite://x.db?table=1bad", ErrBadDSN, "1bad"},
		{"mysql://root@127.0.0.1:3306", ErrBadDSN, "name the database"},
		{"mysql://root@127.0.0.1:3306/test?table=no-dashes", ErrBadDSN, "no-dashes"},
		{"postgres://u:secret@127.0.0.1:1/db?partitions=many", ErrBadDSN, "partitions"},
		{"redis://127.0.0.1:6379/0?prefix={bad}", ErrBadDSN, "prefix"},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			h, err := Open(ctx, tc.dsn)
			if err == nil {
				h.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want %v containing %q", err, tc.is, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

func TestSchemes(t *testing.T) {
	got := strings.Join(Schemes(), " ")
	if got != "memory mysql postgres redis sqlite" {
		t.Fatalf("Schemes() = %q", got)
	}
	h, err := Open(context.Background(), "postgresql://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Scheme != "postgres" || h.PG == nil {
		t.Fatalf("postgresql:// alias: scheme %q", h.Scheme)
	}
}

func TestRedact(t *testing.T) {
	if got := Redact("postgres://app:hunter2@db/app"); strings.Contains(got, "hunter2") || !strings.Contains(got, "app:xxxxx@") {
		t.Fatalf("redact = %q", got)
	}
}

func TestMySQLDriverDSN(t *testing.T) {
	for in, want := range map[string][2]string{
		"mysql://root@127.0.0.1:3306/test":           {"root@tcp(127.0.0.1:3306)/test", ""},
		"mysql://app:pw@db/app?table=inbox&tls=true": {"app:pw@tcp(db:3306)/app?tls=true", "inbox"},
		"mysql:///app": {"tcp(127.0.0.1:3306)/app", ""},
	} {
		u, _ := url.Parse(in)
		d, table, err := mysqlDriverDSN(u)
		if err != nil || d != want[0] || table != want[1] {
			t.Errorf("%s: %q %q %v; want %q %q", in, d, table, err, want[0], want[1])
		}
	}
}

func TestNamedMemoryStoresAreShared(t *testing.T) {
	ctx := context.Background()
	a, _ := Open(ctx, "memory://shared-test")
	b, _ := Open(ctx, "memory://shared-test")
	c, _ := Open(ctx, "memory://")
	k := idem.Key{Scope: "s", ID: "k"}
	if _, err := a.Store.Claim(ctx, idem.ClaimRequest{Key: k}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.Get(ctx, k); err != nil {
		t.Fatalf("memory://shared-test is not shared: %v", err)
	}
	if _, err := c.Store.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("memory:// is shared: %v", err)
	}
}

func TestSQLiteMissingSchema(t *testing.T) {
	ctx := context.Background()
	d := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "x.db"))
	h, err := Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Probe(ctx); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "idem migrate --store") {
		t.Fatalf("probe before migrate: %v", err)
	}
	if err := h.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Probe(ctx); err != nil {
		t.Fatalf("probe after migrate: %v", err)
	}
}

func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	// Port 1 on the loopback refuses connections.
	for _, d := range []string{"postgres://u@127.0.0.1:1/db?connect_timeout=2", "redis://127.0.0.1:1/0?dial_timeout=1s&max_retries=-1",
		"mysql://root@127.0.0.1:1/test?timeout=2s"} {
		h, err := Open(ctx, d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		err = h.Probe(ctx)
		h.Close()
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "is the server running") {
			t.Errorf("%s: probe = %v; want ErrUnreachable with a hint", d, err)
		}
	}
}
