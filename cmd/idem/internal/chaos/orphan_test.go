package chaos

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
)

// orphan leaves a claim in progress whose lease has ended, as a consumer
// killed mid-handler does.
func orphan(ctx context.Context, kind, url string, t tables, prefix string) error {
	var s idem.Store
	switch kind {
	case "mysql", "sqlite":
		h, err := dsn.Open(ctx, withTable(url, t.Records))
		if err != nil {
			return err
		}
		defer h.Close()
		s = h.Store
	case "redis":
		opt, err := goredis.ParseURL(url)
		if err != nil {
			return err
		}
		rdb := goredis.NewClient(opt)
		defer rdb.Close()
		if s, err = redisidem.New(rdb, redisidem.Options{Prefix: prefix}); err != nil {
			return err
		}
	default:
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return err
		}
		defer pool.Close()
		if s, err = postgres.New(pool, postgres.Options{Table: t.Records}); err != nil {
			return err
		}
	}
	now := time.Now()
	_, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "CHAOS_ORDERS/billing", ID: "o-1"}, Now: now,
		LeaseUntil: now.Add(50 * time.Millisecond), ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // the lease runs out: nothing to wait for but the clock
	return nil
}
