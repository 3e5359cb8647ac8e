package dsn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
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
		{"cassandra://localhost", ErrUnknownScheme, "available: cosmos://, memory://"},
		{"mongodb://127.0.0.1:27017/app?ttl=sometimes", ErrBadDSN, "ttl"},
		{"mongodb://127.0.0.1:27017/app?collection=a$b", ErrBadDSN, "a$b"},
		{"mongodb://127.0.0.1:27017/bad.db", ErrBadDSN, "bad.db"},
		{"sqlite://", ErrBadDSN, "name the database file"},
		{"sqlite://x.db?sync=sometimes", ErrBadDSN, "sync"},
		{"sqlite://x.db?tabel=t", ErrBadDSN, `unknown parameter "tabel"`},
		{"sqlite://x.db?table=1bad", ErrBadDSN, "1bad"},
		{"mysql://root@127.0.0.1:3306", ErrBadDSN, "name the database"},
		{"mysql://root@127.0.0.1:3306/test?table=no-dashes", ErrBadDSN, "no-dashes"},
		{"postgres://u:secret@127.0.0.1:1/db?partitions=many", ErrBadDSN, "partitions"},
		{"redis://127.0.0.1:6379/0?prefix={bad}", ErrBadDSN, "prefix"},
		{"cosmos://", ErrBadDSN, "name the account's host"},
		{"cosmos://127.0.0.1:8081/db", ErrBadDSN, "host and parameters only"},
		{"cosmos://u:secret@127.0.0.1:8081", ErrBadDSN, "host and parameters only"},
		{"cosmos://127.0.0.1:8081?db=x", ErrBadDSN, `unknown parameter "db"`},
		{"cosmos://127.0.0.1:8081?key=not-base64!", ErrBadDSN, "not a base64 account key"},
		{"cosmos://127.0.0.1:8081?container=a/b", ErrBadDSN, "a/b"},
		{"cosmos://127.0.0.1:8081?ca=/nonexistent/ca.pem", ErrBadDSN, "ca"},
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
	if got != "cosmos memory mongodb mysql postgres redis sqlite" {
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
	for in, want := range map[string]string{
		"postgres://app:hunter2@db/app":                     "postgres://app:xxxxx@db/app",
		"cosmos://h:8081?key=c2VjcmV0&container=c":          "cosmos://h:8081?key=xxxxx&container=c",
		"cosmos://h:8081?container=c&key=c2VjcmV0%3D%3D":    "cosmos://h:8081?container=c&key=xxxxx",
		"cosmos://h:bad?key=c2VjcmV0":                       "cosmos://h:bad?key=xxxxx",
		"postgres://h/db?sslkey=/etc/k.pem&monkey=business": "postgres://h/db?sslkey=/etc/k.pem&monkey=business",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
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
	now := time.Now()
	if _, err := a.Store.Claim(ctx, idem.ClaimRequest{Key: k, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
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
		for name, check := range map[string]func(context.Context) error{"ping": h.Ping, "probe": h.Probe} {
			err := check(ctx)
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no "+h.Name+" server answers") ||
				!strings.Contains(err.Error(), "start one with: ") {
				t.Errorf("%s: %s = %v; want ErrUnreachable naming the store, with how to start it", d, name, err)
			}
		}
		h.Close()
	}
}

// A login the server refuses is reported as such, not as a server that is
// down.
func TestAuthRefused(t *testing.T) {
	ctx := context.Background()
	pg := testenv.Postgres.Need(t)
	my, err := MySQLURL(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	rd := testenv.Redis.Need(t)
	if !strings.Contains(rd, "://") {
		rd = "redis://" + rd
	}
	for _, d := range []string{
		setUser(t, pg, "idem_no_such_role", ""),
		setUser(t, my, "idem_no_such_user", "secret"),
		setUser(t, rd, "idem_no_such_user", "secret"),
	} {
		h, err := Open(ctx, d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		err = h.Ping(ctx)
		h.Close()
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "store login refused: "+h.Name+" at ") {
			t.Errorf("%s: ping = %v; want ErrAuth naming the store", Redact(d), err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// setUser replaces the user (and password) of a URL-shaped DSN.
func setUser(t *testing.T, d, user, pass string) string {
	t.Helper()
	u, err := url.Parse(d)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	if pass != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u.String()
}

// A DSN without the ?table= under which the database keeps idem's records
// is told to name it, not to migrate a second, empty table. A DSN that names
// its table, or a database with no records table, gets the advice to
// migrate with the DSN as given, parameters included.
func TestNoSchemaAdvice(t *testing.T) {
	ctx := context.Background()
	base := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "x.db"))
	fresh := base + "?sync=normal&table=idem_fresh"
	probe := func(d string) error {
		t.Helper()
		h, err := Open(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		return h.Probe(ctx)
	}
	if err := probe(fresh); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "idem migrate --store '"+fresh+"'") {
		t.Fatalf("probe of an empty database: %v; want the advice to migrate %s", err, fresh)
	}

	h, err := Open(ctx, base+"?table=billing_inbox")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h.Close()
	for _, d := range []string{base, base + "?sync=normal"} {
		err := probe(d)
		want := "--store '" + SetParam(d, "table", "billing_inbox") + "'"
		if !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "create it with") {
			t.Errorf("%s: probe = %v; want the advice %s and no migrate", d, err, want)
		}
	}
	if err := probe(fresh); !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "idem migrate --store '"+fresh+"'") ||
		!strings.Contains(err.Error(), "records in billing_inbox") {
		t.Errorf("probe of a table the DSN names: %v; want migrate %s, billing_inbox mentioned", err, fresh)
	}
}

// The SQL servers list their records tables the same way.
func TestNoSchemaAdviceOnServers(t *testing.T) {
	ctx := context.Background()
	my, err := MySQLURL(testenv.MySQL.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{testenv.Postgres.Need(t), my} {
		table := fmt.Sprintf("idem_dsn_advice_%d", time.Now().UnixNano()%1e9)
		h, err := Open(ctx, SetParam(d, "table", table))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		drop := "DROP TABLE IF EXISTS " + table + ", " + table + "_migrations"
		t.Cleanup(func() {
			if h.PG != nil {
				_, _ = h.PG.Exec(context.Background(), drop)
			} else {
				_, _ = h.SQL.ExecContext(context.Background(), drop)
			}
			h.Close()
		})
		missing := SetParam(d, "table", table+"_x")
		g, err := Open(ctx, missing)
		if err != nil {
			t.Fatal(err)
		}
		err = g.Probe(ctx)
		g.Close()
		if !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "idem migrate --store '"+Redact(missing)+"'") ||
			!strings.Contains(err.Error(), table+",") && !strings.Contains(err.Error(), table+":") {
			t.Errorf("%s: probe = %v; want migrate with the DSN, and the tables holding records, %s among them", Redact(missing), err, table)
		}
	}
}

func TestSetParam(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite://x.db":                    "sqlite://x.db?table=t",
		"postgres://h/db?sslmode=disable":  "postgres://h/db?sslmode=disable&table=t",
		"mysql://h/db?table=old&tls=true":  "mysql://h/db?table=t&tls=true",
		"postgres://h/db?tablespace=x&a=b": "postgres://h/db?tablespace=x&a=b&table=t",
	} {
		if got := SetParam(in, "table", "t"); got != want {
			t.Errorf("SetParam(%q) = %q, want %q", in, got, want)
		}
	}
}
