package integration_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"html"
	"net/http"
	"net/url"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/internal/pgtest"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/mysql"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
)

func randomName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// serverStores are the stores on the local servers; the browser tests use
// memory and sqlite, these run the pages and actions over HTTP.
var serverStores = []struct {
	name string
	open func(t testing.TB) console.Store
}{
	{"postgres", func(t testing.TB) console.Store {
		pool, _, _ := pgtest.Schema(t, "idem_console")
		s, err := postgres.New(pool, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"mysql", func(t testing.TB) console.Store {
		cfg, err := gomysql.ParseDSN(testenv.MySQL.Need(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ParseTime = true
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		table := "idem_console_" + randomName(t)
		s, err := mysql.New(db, mysql.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, n := range []string{table, table + "_migrations"} {
				_, _ = db.Exec("DROP TABLE IF EXISTS `" + n + "`")
			}
		})
		return s
	}},
	{"redis", func(t testing.TB) console.Store {
		c := goredis.NewClient(&goredis.Options{Addr: testenv.Redis.Need(t)})
		t.Cleanup(func() { c.Close() })
		prefix := "idemconsole:" + randomName(t)
		t.Cleanup(func() {
			ctx := context.Background()
			keys, _ := c.Keys(ctx, prefix+":*").Result()
			if len(keys) > 0 {
				c.Del(ctx, keys...)
			}
		})
		s, err := redisidem.New(c, redisidem.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// TestEveryStore shows each store's counts and records, resolves a stale
// record each way and sweeps, over HTTP.
func TestEveryStore(t *testing.T) {
	for _, s := range append(stores[:len(stores):len(stores)], serverStores...) {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s.open(t), operator, nil)
			c := f.client(t)
			checkCounts(t, f, c)
			code, body := get(t, c, f.base+"parked")
			if code != http.StatusOK {
				t.Fatalf("parked: %d", code)
			}
			for _, k := range []string{"order-stuck", html.EscapeString(xssStale)} {
				if !contains(body, k) {
					t.Errorf("parked page lacks %q", k)
				}
			}
			_, page := get(t, c, recordPage(f, f.sd.parked))
			m := csrfRE.FindStringSubmatch(page)
			if m == nil {
				t.Fatal("no form")
			}
			token := html.UnescapeString(m[1])
			rec := mustGet(t, f.st, f.sd.parked)
			if resp, body := post(t, c, f.base+"resolve", resolveForm(f.sd.parked, console.OpRelease, rec.Token, token), nil); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("release: %d\n%s", resp.StatusCode, body)
			}
			if got := mustGet(t, f.st, f.sd.parked); got.State != idem.StateReleased {
				t.Fatalf("after release: %+v", got)
			}
			old := mustGet(t, f.st, f.sd.xssOld)
			form := resolveForm(f.sd.xssOld, console.OpComplete, old.Token, token)
			form.Set("result", xssResult)
			if resp, body := post(t, c, f.base+"resolve", form, nil); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("complete: %d\n%s", resp.StatusCode, body)
			}
			if got := mustGet(t, f.st, f.sd.xssOld); got.State != idem.StateCompleted || string(got.Result) != xssResult {
				t.Fatalf("after complete: %+v", got)
			}
			if resp, _ := post(t, c, f.base+"sweep", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sweep: %d", resp.StatusCode)
			}
			stats, err := f.st.Stats(context.Background(), f.sd.now)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range stats {
				if st.Expired != 0 || st.Stale != 0 {
					t.Errorf("scope %q after resolving and sweeping: %+v", st.Scope, st)
				}
			}
			checkCounts(t, f, c)
		})
	}
}
