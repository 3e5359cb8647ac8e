package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/memory"
)

// seedStore writes records in every state an operator meets, at times
// relative to now:
//
//	billing/order-1  completed an hour ago, result "ok"
//	billing/order-2  in progress, claimed 2m ago, lease ended 1m ago (stale)
//	billing/order-3  in progress, lease for another hour
//	mailer/m-1       released
//	mailer/m-2       completed, retention ended an hour ago (expired), unless
//	                 the store expires records natively (Redis deletes it)
func seedStore(t *testing.T, s idem.Store, nativeExpiry bool) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	claim := func(scope, id string, at, lease, expires time.Time) int64 {
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: scope, ID: id}, Fingerprint: "fp-" + id,
			Now: at, LeaseUntil: lease, ExpiresAt: expires})
		if err != nil || c.Outcome != idem.ClaimAcquired {
			t.Fatalf("seed %s/%s: %v %v", scope, id, c.Outcome, err)
		}
		return c.Record.Token
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	k1 := idem.Key{Scope: "billing", ID: "order-1"}
	tok := claim(k1.Scope, k1.ID, now.Add(-time.Hour), now.Add(-time.Hour+time.Minute), now.Add(24*time.Hour))
	must(s.Complete(ctx, idem.CompleteRequest{Key: k1, Token: tok, Result: []byte("ok"), Now: now.Add(-time.Hour), ExpiresAt: now.Add(24 * time.Hour)}))
	claim("billing", "order-2", now.Add(-2*time.Minute), now.Add(-time.Minute), now.Add(24*time.Hour))
	claim("billing", "order-3", now, now.Add(time.Hour), now.Add(24*time.Hour))
	km1 := idem.Key{Scope: "mailer", ID: "m-1"}
	tok = claim(km1.Scope, km1.ID, now.Add(-time.Minute), now.Add(time.Minute), now.Add(24*time.Hour))
	must(s.Release(ctx, idem.ReleaseRequest{Key: km1, Token: tok, Now: now.Add(-time.Minute)}))
	if nativeExpiry {
		return
	}
	km2 := idem.Key{Scope: "mailer", ID: "m-2"}
	tok = claim(km2.Scope, km2.ID, now.Add(-2*time.Hour), now.Add(-2*time.Hour+time.Minute), now.Add(-time.Hour))
	must(s.Complete(ctx, idem.CompleteRequest{Key: km2, Token: tok, Now: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}))
}

// operatorStores are the DSNs the operator commands are tested on. Each
// returns a fresh store's DSN (its own file, table or key prefix) and removes
// it when the test ends; servers that are not running skip their test.
var operatorStores = map[string]func(t *testing.T) string{
	"memory": func(t *testing.T) string { return fmt.Sprintf("memory://%s-%d", t.Name(), time.Now().UnixNano()) },
	"sqlite": func(t *testing.T) string {
		return "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "idem.db"))
	},
	"postgres": func(t *testing.T) string {
		addr := testenv.Postgres.Need(t)
		return withParam(t, addr, "table", uniqueName("idem_cli"))
	},
	"mysql": func(t *testing.T) string {
		d, err := dsn.MySQLURL(testenv.MySQL.Need(t))
		if err != nil {
			t.Fatal(err)
		}
		return withParam(t, d, "table", uniqueName("idem_cli"))
	},
	"redis": func(t *testing.T) string {
		addr := testenv.Redis.Need(t)
		if !strings.Contains(addr, "://") {
			addr = "redis://" + addr
		}
		return withParam(t, addr, "prefix", uniqueName("idem-cli"))
	},
	"cosmos": func(t *testing.T) string { return withParam(t, cosmosAccount(t), "container", uniqueName("idem_cli")) },
}

// cosmosAccount starts an in-process Cosmos DB account for t and returns
// its DSN.
func cosmosAccount(t *testing.T) string {
	t.Helper()
	d, stop, err := dsn.InProcessCosmos(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return d
}

func uniqueName(base string) string { return fmt.Sprintf("%s_%d", base, time.Now().UnixNano()%1e12) }

// withParam adds a parameter to a DSN and drops what the test creates under
// it when the test ends.
func withParam(t *testing.T, d, key, val string) string {
	sep := "?"
	if strings.Contains(d, "?") {
		sep = "&"
	}
	d += sep + key + "=" + val
	t.Cleanup(func() { dropStore(t, d, val) })
	return d
}

// dropStore removes a test's records table (and its migrations table) or
// its Redis keys.
func dropStore(t *testing.T, d, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := dsn.Open(ctx, d)
	if err != nil {
		t.Logf("cleanup %s: %v", d, err)
		return
	}
	defer h.Close()
	drop := "DROP TABLE IF EXISTS " + name + ", " + name + "_migrations"
	switch {
	case h.SQL != nil:
		_, err = h.SQL.ExecContext(ctx, drop)
	case h.PG != nil:
		_, err = h.PG.Exec(ctx, drop)
	case h.Cosmos != nil:
		err = h.Native.(*cosmos.Store).Drop(ctx)
	case h.Redis != nil:
		var keys []string
		keys, err = h.Redis.Keys(ctx, name+"*").Result()
		if err == nil && len(keys) > 0 {
			err = h.Redis.Del(ctx, keys...).Err()
		}
	}
	if err != nil {
		t.Logf("cleanup %s: %v", d, err)
	}
}

func TestOperatorCommands(t *testing.T) {
	for name, newDSN := range operatorStores {
		t.Run(name, func(t *testing.T) {
			d := newDSN(t)
			if name != "memory" && name != "redis" {
				// Before migrate, the store says how to fix it.
				code, _, errs := runCmd(t, "stats", "--store", d)
				if code != exitFailure || !strings.Contains(errs, "idem migrate --store") {
					t.Errorf("stats before migrate: exit %d, want 1 with a hint to migrate:\n%s", code, errs)
				}
			}
			if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
				t.Fatalf("migrate: %d %s %s", code, out, errs)
			}
			h, err := dsn.Open(context.Background(), d)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			seedStore(t, h.Store, name == "redis")
			testOperator(t, d, name == "redis")
		})
	}
}

func testOperator(t *testing.T, d string, nativeExpiry bool) {
	// without drops the expired record from expectations where the store
	// deleted it itself.
	without := func(s string) string {
		if nativeExpiry {
			s = strings.TrimSpace(strings.ReplaceAll(s, "mailer/m-2", ""))
		}
		return s
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errs := runCmd(t, append(args, "--store", d)...)
		if code != exitOK {
			t.Fatalf("idem %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
		}
		return out
	}
	fail := func(want string, args ...string) {
		t.Helper()
		code, out, errs := runCmd(t, append(args, "--store", d)...)
		if code != exitFailure || !strings.Contains(errs, want) {
			t.Fatalf("idem %s: exit %d, want 1 with %q\n%s%s", strings.Join(args, " "), code, want, out, errs)
		}
	}
	ids := func(out string) string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 && !strings.HasPrefix(line, " ") && f[0] != "" {
				if strings.Contains(line, "records shown") {
					break
				}
				got = append(got, f[0]+"/"+f[1])
			}
		}
		return strings.Join(got, " ")
	}

	// stats: counts by scope and state.
	out := ok("stats")
	if !strings.Contains(out, "SCOPE") || !strings.Contains(out, "OLDEST_IN_PROGRESS") {
		t.Fatalf("stats header:\n%s", out)
	}
	want := map[string][]string{"billing": {"2", "1", "1", "0", "0"}, "mailer": {"0", "0", "1", "1", "1"}}
	if nativeExpiry {
		want["mailer"] = []string{"0", "0", "0", "1", "0"}
	}
	for _, line := range strings.Split(out, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 6 {
			if w := want[f[0]]; strings.Join(f[1:6], " ") != strings.Join(w, " ") {
				t.Errorf("stats %s: %v, want in_progress stale completed released expired = %v", f[0], f[1:6], w)
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("stats lacks scopes %v:\n%s", want, out)
	}
	js := decode(t, ok("stats", "--json"))
	if sc, _ := js["scopes"].([]any); len(sc) != 2 {
		t.Errorf("stats --json: %v", js)
	}

	// list with filters and paging.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list"}, "billing/order-1 billing/order-2 billing/order-3 mailer/m-1 mailer/m-2"},
		{[]string{"list", "--scope", "mailer"}, "mailer/m-1 mailer/m-2"},
		{[]string{"list", "--state", "in_progress"}, "billing/order-2 billing/order-3"},
		{[]string{"list", "--stale"}, "billing/order-2"},
		{[]string{"list", "--older-than", "30m"}, "billing/order-1 mailer/m-2"},
		{[]string{"list", "--limit", "2"}, "billing/order-1 billing/order-2"},
	} {
		out := ok(tc.args...)
		if got := ids(out); got != without(tc.want) {
			t.Errorf("idem %s: %q, want %q\n%s", strings.Join(tc.args, " "), got, tc.want, out)
		}
	}
	next := idem.Record{Scope: "billing", ID: "order-2"}.Cursor().String()
	if out := ok("list", "--limit", "2"); !strings.Contains(out, "next page: --after "+next+"\n") {
		t.Errorf("a full page does not print the next page's cursor %s:\n%s", next, out)
	}
	if out := ok("list", "--limit", "2", "--after", next); ids(out) != "billing/order-3 mailer/m-1" {
		t.Errorf("list --after the printed cursor: %q, want billing/order-3 mailer/m-1\n%s", ids(out), out)
	}
	if out := ok("list", "--scope", "nobody"); !strings.Contains(out, "No records match (") {
		t.Errorf("empty list: %s", out)
	}
	lj := decode(t, ok("list", "--json", "--limit", "2"))
	if recs, _ := lj["records"].([]any); len(recs) != 2 || lj["next"] == nil || lj["next"].(map[string]any)["after"] != next {
		t.Errorf("list --json: %v", lj)
	}

	// show.
	out = ok("show", "billing", "order-1")
	for _, w := range []string{"completed", `"ok"`, "fp-order-1", "token"} {
		if !strings.Contains(out, w) {
			t.Errorf("show lacks %q:\n%s", w, out)
		}
	}
	if out := ok("show", "billing", "order-2"); !strings.Contains(out, "in_progress (stale)") {
		t.Errorf("show of a stale record:\n%s", out)
	}
	sj := decode(t, ok("show", "billing", "order-2", "--json"))
	if sj["state"] != "in_progress" || sj["stale"] != true {
		t.Errorf("show --json: %v", sj)
	}
	fail("no record", "show", "billing", "order-404")

	// resolve: complete the stale record, release the live one.
	if out := ok("resolve", "billing", "order-2", "--complete", "--result", "charged by hand"); !strings.Contains(out, "completed") {
		t.Errorf("resolve --complete: %s", out)
	}
	sj = decode(t, ok("show", "billing", "order-2", "--json"))
	if sj["state"] != "completed" || sj["result"] != "charged by hand" {
		t.Errorf("after resolve --complete: %v", sj)
	}
	fail("not in_progress", "resolve", "billing", "order-2", "--release")
	ok("resolve", "billing", "order-3", "--release", "--json")
	if sj := decode(t, ok("show", "billing", "order-3", "--json")); sj["state"] != "released" {
		t.Errorf("after resolve --release: %v", sj)
	}
	fail("nothing to resolve", "resolve", "billing", "order-404", "--complete")

	// sweep deletes the expired record only.
	wantSweep := "Deleted 1 expired record."
	if nativeExpiry {
		wantSweep = "Deleted 0 expired records."
	}
	if out := ok("sweep"); !strings.Contains(out, wantSweep) {
		t.Errorf("sweep: %s", out)
	}
	if sj := decode(t, ok("sweep", "--json")); sj["deleted"] != float64(0) {
		t.Errorf("second sweep: %v", sj)
	}
	if got := ids(ok("list")); got != "billing/order-1 billing/order-2 billing/order-3 mailer/m-1" {
		t.Errorf("after sweep: %s", got)
	}
}

// bareStore hides the memory store's Inspector.
type bareStore struct{ idem.Store }

func TestListWithoutInspector(t *testing.T) {
	h := &dsn.Handle{Scheme: "bare", Store: bareStore{memory.New()}}
	_, err := inspector(h, "list")
	if err == nil || !strings.Contains(err.Error(), "cannot list records") || !strings.Contains(err.Error(), "idem show") {
		t.Fatalf("err = %v", err)
	}
}

func TestStoreFromEnvironment(t *testing.T) {
	t.Setenv("IDEM_STORE", "memory://env-test")
	if code, out, errs := runCmd(t, "stats"); code != exitOK || !strings.Contains(out, "no records") {
		t.Fatalf("stats with IDEM_STORE: %d %s %s", code, out, errs)
	}
}
