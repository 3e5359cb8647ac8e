package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	_ "github.com/idemgo/idem/store/sqlite" // the "sqlite" database/sql driver
)

// ordersTable is a business table of an entity inbox: the order id is the
// key, with the message's fingerprint and the order's version.
func ordersTable(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE orders (order_id TEXT PRIMARY KEY, fp TEXT, version INTEGER NOT NULL, created_at INTEGER NOT NULL)`,
		`INSERT INTO orders VALUES ('order-1', 'fp-a', 3, 1), ('order-2', 'fp-b', 1, 2), ('` + strings.ReplaceAll(hostileScope, `'`, `''`) + `', 'fp-c', 7, 3)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func ordersInbox(db *sql.DB) *console.EntitySQL {
	return &console.EntitySQL{DB: db, Dialect: "sqlite", Scope: "orders", Table: "orders",
		KeyColumn: "order_id", FingerprintColumn: "fp", VersionColumn: "version", OrderColumn: "created_at"}
}

// observeEntityOutcomes tells rec of a conflict and two stale versions in
// scope orders, as the entity inbox's guard would.
func observeEntityOutcomes(rec *console.Recorder) {
	k := idem.Key{Scope: "orders", ID: "order-1"}
	rec.Observe(context.Background(), idem.Event{Key: k, Outcome: idem.OutcomeConflict,
		Err: &idem.ConflictError{Key: k, Fingerprint: "fp-other", Record: idem.Record{Fingerprint: "fp-a"}}})
	for range 2 {
		rec.Observe(context.Background(), idem.Event{Key: idem.Key{Scope: "orders", ID: "order-2"}, Outcome: idem.OutcomeSuperseded})
	}
}

func TestEntitiesPage(t *testing.T) {
	db := ordersTable(t)
	rec := console.NewRecorder(console.RecorderOptions{})
	observeEntityOutcomes(rec)
	psrv := httptest.NewServer(&fakeProm{answer: func(_ string, start, step float64) (int, any) {
		return http.StatusOK, matrix(start, step, map[string][]float64{"orders": {1, 2, 3}})
	}})
	t.Cleanup(psrv.Close)
	c := console.New(stores[0].open(t), console.Options{Logger: quiet, Recorder: rec, Prometheus: psrv.URL,
		Entities: []console.EntityInbox{ordersInbox(db)}})
	t.Cleanup(func() { c.Close() })
	base := serve(t, c)
	code, body := get(t, http.DefaultClient, base+"/entities")
	if code != http.StatusOK {
		t.Fatalf("entities: %d %s", code, body)
	}
	for _, want := range []string{
		`<td class="key">order-2</td><td class="mono">order-2</td><td data-version>1</td>`,
		`<span data-count="rec-conflicts">1</span>`, `<span data-count="rec-superseded">2</span>`,
		`<span data-count="prom-conflicts">6</span>`, `<span data-count="prom-superseded">6</span>`,
		`fp-other`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the entities page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, hostileScope) {
		t.Error("a key from a business row is not escaped")
	}
	// Newest first, by the order column.
	if i, j := strings.Index(body, ">order-2<"), strings.Index(body, ">order-1<"); i < 0 || j < 0 || i > j {
		t.Errorf("rows not newest first")
	}
	if _, body := get(t, http.DefaultClient, base+"/"); !strings.Contains(body, `href="entities"`) {
		t.Error("no Entities link in the navigation")
	}

	// A console without entity inboxes has no such page.
	plain := serve(t, console.New(stores[0].open(t), console.Options{Logger: quiet}))
	if code, _ := get(t, http.DefaultClient, plain+"/entities"); code != http.StatusNotFound {
		t.Errorf("entities without Options.Entities: %d, want 404", code)
	}
}

func TestEntitySQLRefusesBadNames(t *testing.T) {
	db := ordersTable(t)
	for _, e := range []*console.EntitySQL{
		{DB: db, Dialect: "oracle", Table: "orders", KeyColumn: "order_id"},
		{DB: db, Dialect: "sqlite", Table: "orders; DROP TABLE orders", KeyColumn: "order_id"},
		{DB: db, Dialect: "sqlite", Table: "orders", KeyColumn: "order_id", OrderColumn: "created_at DESC, (SELECT 1)"},
		{DB: db, Dialect: "sqlite", KeyColumn: "order_id"},
		{DB: db, Dialect: "sqlite", Table: "orders"},
	} {
		if _, err := e.RecentEntities(context.Background(), 10); !errors.Is(err, console.ErrEntityConfig) {
			t.Errorf("%+v: %v, want ErrEntityConfig", e, err)
		}
	}
	if rows, err := ordersInbox(db).RecentEntities(context.Background(), 10); err != nil || len(rows) != 3 {
		t.Fatalf("the table after the bad names: %v %v", rows, err)
	}
}

// TestBrowserEntitiesStayText: a business row's hostile key shows as text
// in a real browser, next to the row's version.
func TestBrowserEntitiesStayText(t *testing.T) {
	ctx := browser(t)
	db := ordersTable(t)
	c := console.New(stores[0].open(t), console.Options{Logger: quiet, Entities: []console.EntityInbox{ordersInbox(db)}})
	t.Cleanup(func() { c.Close() })
	base := serve(t, c)
	do(t, ctx, chromedp.Navigate(base+"/entities"), chromedp.WaitVisible(chromedp.CSS(`table.entities`)))
	keys := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('table.entities td.key')).map(td => td.textContent)`)
	if len(keys) != 3 || keys[0] != hostileScope || keys[1] != "order-2" {
		t.Fatalf("the browser shows keys %q", keys)
	}
	if p := eval[pwned](t, ctx, pwnedCheck); p.Flag != 0 || p.Elements != 0 {
		t.Fatalf("a business row's key ran in the browser: %+v", p)
	}
}
