package stores_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ferretdbtest"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/memory"
	mongoidem "github.com/idemgo/idem/store/mongo"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
	"github.com/idemgo/idem/store/sqlite"
	"github.com/idemgo/idem/store/storetest/lincheck"
)

// Every store of the repository runs the check: briefly by default, as long
// as asked with -lincheck.ops=N or IDEM_LINCHECK_OPS=N (see the package
// documentation). Stores on servers skip when the server does not answer,
// or fail under IDEM_REQUIRE_SERVICES=1.

func TestMemory(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store { return memory.New() })
}

func TestSQLite(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store {
		s := must(sqlite.Open(filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{}))(t)
		t.Cleanup(func() { s.Close() })
		migrate(t, s.Migrate)
		return s
	})
}

func TestPostgres(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store {
		_, schema, url := pgtest.Schema(t, "idem_lincheck")
		cfg := must(pgxpool.ParseConfig(url))(t)
		cfg.MaxConns = 10 // a connection per client, and spare
		pool := must(pgxpool.NewWithConfig(context.Background(), cfg))(t)
		t.Cleanup(pool.Close) // before the schema's drop: cleanups run last first
		s := must(postgres.New(pool, postgres.Options{Table: schema + ".idem_records"}))(t)
		migrate(t, s.Migrate)
		return s
	})
}

func TestMySQL(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store {
		cfg := must(gomysql.ParseDSN(testenv.MySQL.Need(t)))(t)
		cfg.InterpolateParams = true
		db := must(sql.Open("mysql", cfg.FormatDSN()))(t)
		t.Cleanup(func() { db.Close() })
		s := must(mysql.New(db, mysql.Options{Table: "idem_lincheck_" + randomHex(t)}))(t)
		t.Cleanup(func() {
			for _, table := range []string{s.Table(), s.Table() + "_migrations"} {
				if _, err := db.Exec("DROP TABLE IF EXISTS `" + table + "`"); err != nil {
					t.Errorf("drop %s: %v", table, err)
				}
			}
		})
		migrate(t, s.Migrate)
		return s
	})
}

func TestRedis(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store {
		c := goredis.NewClient(&goredis.Options{Addr: testenv.Redis.Need(t), PoolSize: 16})
		t.Cleanup(func() { c.Close() })
		// Every record of the run carries a Redis TTL under a second (a
		// retention of the fake clock), so the prefix empties itself.
		return must(redisidem.New(c, redisidem.Options{Prefix: "idemlincheck:" + randomHex(t)}))(t)
	})
}

func TestMongo(t *testing.T) {
	linearizable(t, func(t *testing.T) idem.Store {
		c := must(mongo.Connect(options.Client().ApplyURI(ferretdbtest.URI(t)).SetMaxPoolSize(16)))(t)
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		db := c.Database("idemlincheck_" + randomHex(t))
		t.Cleanup(func() {
			if err := db.Drop(context.Background()); err != nil {
				t.Errorf("drop database: %v", err)
			}
		})
		s := must(mongoidem.New(db, mongoidem.Options{}))(t)
		migrate(t, s.Migrate)
		return s
	})
}

// linearizable checks, beside the other stores' tests, the store open
// returns.
func linearizable(t *testing.T, open func(t *testing.T) idem.Store) {
	t.Parallel()
	lincheck.Run(t, open, lincheck.Options{})
}

// must returns a function that returns v, failing t if err is not nil.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func migrate(t *testing.T, m func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

func randomHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestMain stops the embedded MongoDB-API server (ferretdbtest) if a test
// started one.
func TestMain(m *testing.M) {
	code := m.Run()
	ferretdbtest.Stop()
	os.Exit(code)
}
