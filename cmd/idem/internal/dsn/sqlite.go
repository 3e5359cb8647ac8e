package dsn

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/idemgo/idem/store/sqlite"
)

func init() { register("sqlite", openSQLite) }

// openSQLite opens sqlite://PATH[?table=T&sync=normal]: sqlite://idem.db and
// sqlite://./data/idem.db are relative, sqlite:///var/lib/idem.db absolute.
// The file is created if missing.
func openSQLite(_ context.Context, _ *url.URL, raw string) (*Handle, error) {
	rest := raw[len("sqlite://"):]
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("%w: %s: name the database file, e.g. sqlite://idem.db or sqlite:///var/lib/app/idem.db", ErrBadDSN, raw)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, raw, err)
	}
	opts := sqlite.Options{Table: q.Get("table")}
	switch strings.ToLower(q.Get("sync")) {
	case "", "full":
	case "normal":
		opts.Synchronous = sqlite.SyncNormal
	default:
		return nil, fmt.Errorf("%w: %s: sync=%q: want full or normal", ErrBadDSN, raw, q.Get("sync"))
	}
	for k := range q {
		if k != "table" && k != "sync" {
			return nil, fmt.Errorf("%w: %s: unknown parameter %q (sqlite takes table and sync)", ErrBadDSN, raw, k)
		}
	}
	s, err := sqlite.Open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, raw, err)
	}
	return &Handle{Store: s, Native: s, SQL: s.DB(), Migrate: s.Migrate, Close: s.Close, Where: "table " + s.Table(),
		table: s.Table(), tableGiven: opts.Table != "", ping: s.DB().PingContext, tables: sqliteTables(s.DB())}, nil
}
