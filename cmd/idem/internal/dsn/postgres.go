package dsn

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgo/idem/store/postgres"
)

func init() { register("postgres", openPostgres) }

// openPostgres opens postgres://USER@HOST:PORT/DB?table=T&partitions=N plus
// any parameter pgx understands (sslmode, pool_max_conns, ...).
func openPostgres(ctx context.Context, u *url.URL, raw string) (*Handle, error) {
	q := u.Query()
	opts := postgres.Options{Table: q.Get("table")}
	if p := q.Get("partitions"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: partitions=%q is not a number", ErrBadDSN, Redact(raw), p)
		}
		opts.Partitions = n
	}
	q.Del("table")
	q.Del("partitions")
	u2 := *u
	u2.Scheme = "postgres"
	u2.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u2.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	table := opts.Table
	if table == "" {
		table = "idem_records"
	}
	return &Handle{Store: s, Native: s, PG: pool, Migrate: s.Migrate, Close: func() error { pool.Close(); return nil },
		Where: "table " + table, table: table, tableGiven: opts.Table != "", ping: pool.Ping, tables: pgTables(pool)}, nil
}
