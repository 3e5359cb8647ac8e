package dsn

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// Fuzz targets for the DSN parser: what an operator types after --store
// (or puts in IDEM_STORE), which error messages quote. Seed corpora are in
// testdata/fuzz; CI runs each for a few seconds.

// fuzzSchemes are the schemes whose opener neither touches the file system
// nor dials a server when it opens (sqlite creates its file: left out).
var fuzzSchemes = map[string]bool{"memory": true, "postgres": true, "postgresql": true, "mysql": true, "mariadb": true,
	"redis": true, "rediss": true}

// secret is the password (or key= parameter) a DSN spells out, when it is one a test can look
// for in the output: url.Parse's view, or for a DSN url.Parse rejects the
// text between "user:" and the last '@'; at least 6 bytes long and found
// once in raw.
func secret(raw string) string {
	var p string
	if u, err := url.Parse(raw); err == nil {
		if u.User != nil {
			p, _ = u.User.Password()
		}
		if k := u.Query().Get("key"); p == "" && k != "" {
			p = k // a cosmos:// DSN's account key
		}
	} else if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				p = rest[c+1 : at]
			}
		}
	}
	if len(p) < 6 || strings.Count(raw, p) != 1 {
		return ""
	}
	return p
}

func FuzzOpen(f *testing.F) {
	for _, s := range []string{
		"memory://", "memory://shared", "postgres://u:hunter22@127.0.0.1:5432/app?table=t&partitions=4",
		"postgres://user:hunter22@host:port/db", "postgresql://u@h/db?partitions=x", "postgres://u:hunter22@h/db?sslmode=bogus",
		"mysql://root:hunter22@127.0.0.1:3306/test?table=idem", "mariadb://u@h/", "mysql://u:p@h/a/b",
		"redis://:hunter22@127.0.0.1:6379/0?prefix=app", "rediss://h:6379?prefix=a{b", "redis://h/notanumber",
		"", "nosscheme", "://x", "ftp://x", "POSTGRES://u:hunter22@h/db", "postgres://u:hun%zzter22@h/db",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if head, _, ok := strings.Cut(strings.TrimSpace(raw), "://"); ok {
			scheme := strings.ToLower(head)
			if a, ok := aliases[scheme]; ok {
				scheme = a
			}
			if openers[scheme] != nil && !fuzzSchemes[scheme] {
				t.Skip() // opens files or dials
			}
		}
		h, err := Open(context.Background(), raw)
		p := secret(strings.TrimSpace(raw))
		if err != nil {
			if !errors.Is(err, ErrBadDSN) && !errors.Is(err, ErrUnknownScheme) {
				t.Fatalf("Open(%q): %v is neither ErrBadDSN nor ErrUnknownScheme", raw, err)
			}
			if p != "" && strings.Contains(err.Error(), p) {
				t.Fatalf("Open(%q): the error shows the password: %v", raw, err)
			}
			return
		}
		defer h.Close()
		if h.Store == nil || h.Scheme == "" || h.Name == "" {
			t.Fatalf("Open(%q): handle without store, scheme or name: %+v", raw, h)
		}
		if p != "" && strings.Contains(h.Redacted, p) {
			t.Fatalf("Open(%q): Redacted %q shows the password", raw, h.Redacted)
		}
	})
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{"postgres://u:hunter22@h/db", "postgres://u:hunter22@h:port/db", "redis://:hunter22@h",
		"u:hunter22@tcp(h:3306)/db", "amqp://guest:guest@127.0.0.1:5672/", "x://a:b@c@d",
		"cosmos://h:8081?key=c2VjcmV0LWtleQ==&container=c", "cosmos://h?container=c&key=hunter22#frag"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := Redact(raw)
		if p := secret(raw); p != "" && strings.Contains(r, p) {
			t.Fatalf("Redact(%q) = %q shows the password", raw, r)
		}
	})
}

// FuzzMySQLURL: a driver DSN converted to the mysql:// form converts back
// to the same user, password, address and database.
func FuzzMySQLURL(f *testing.F) {
	for _, s := range []string{"root@tcp(127.0.0.1:3306)/test", "u:p@ss@tcp(h:1)/db", "u@tcp([::1]:3306)/d", "/db", "bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, driverDSN string) {
		u, err := MySQLURL(driverDSN)
		if err != nil {
			if !errors.Is(err, ErrBadDSN) {
				t.Fatalf("MySQLURL(%q): %v is not ErrBadDSN", driverDSN, err)
			}
			return
		}
		in, _ := gomysql.ParseDSN(driverDSN)
		host, port, herr := net.SplitHostPort(in.Addr)
		if in.DBName == "" || strings.Contains(in.DBName, "/") || in.Net != "tcp" || herr != nil || host == "" || port == "" {
			return // not a form the mysql:// scheme takes
		}
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("MySQLURL(%q) = %q, which does not parse: %v", driverDSN, u, err)
		}
		back, _, err := mysqlDriverDSN(pu)
		if err != nil {
			t.Fatalf("MySQLURL(%q) = %q, which does not convert back: %v", driverDSN, u, err)
		}
		out, err := gomysql.ParseDSN(back)
		if err != nil {
			t.Fatalf("MySQLURL(%q) = %q -> %q, which the driver rejects: %v", driverDSN, u, back, err)
		}
		if out.User != in.User || out.Passwd != in.Passwd || out.Addr != in.Addr || out.DBName != in.DBName {
			t.Fatalf("round trip of %q through %q: user %q/%q passwd %q/%q addr %q/%q db %q/%q", driverDSN, u,
				in.User, out.User, in.Passwd, out.Passwd, in.Addr, out.Addr, in.DBName, out.DBName)
		}
	})
}
