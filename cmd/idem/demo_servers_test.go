package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/internal/testenv"
)

// TestDemoCleansUpNamedStores runs the demo on each store a user can name
// and checks that it removed its records and ledger tables afterwards, and
// said so.
func TestDemoCleansUpNamedStores(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres", "mysql", "redis", "cosmos"} {
		t.Run(name, func(t *testing.T) {
			d := operatorStores[name](t)
			code, out, errs := runCmd(t, "demo", "--json", "--store", d, "--messages", "120", "--seed", "8")
			if code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			rep := decode(t, out)
			scope, _ := rep["scope"].(string)
			if rep["invariant_ok"] != true || rep["records_removed"] != float64(120) || rep["left_behind"] != nil ||
				rep["store_named"] != true || rep["schema_created"] != (name != "redis") || !strings.HasPrefix(scope, "demo-billing-") {
				t.Fatalf("report: %v", rep)
			}
			h, err := dsn.Open(context.Background(), d)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			recs, err := h.Store.(idem.Inspector).List(context.Background(), idem.ListFilter{Scope: scope})
			if err != nil || len(recs) != 0 {
				t.Errorf("the demo left %d records of scope %s (%v)", len(recs), scope, err)
			}
			if tables := ledgerTables(t, h, rep["run_id"].(string)); len(tables) > 0 {
				t.Errorf("the demo left its ledger tables %v", tables)
			}

			// The text report says what it removed, and that the schema stays.
			code, out, errs = runCmd(t, "demo", "--store", d, "--messages", "30", "--seed", "9")
			if code != exitOK || !strings.Contains(out, "Cleanup: removed the run's") || !strings.Contains(out, "30 records of scope demo-billing-") ||
				strings.Contains(out, "created idem's schema") {
				t.Errorf("second run: exit %d, want a cleanup line and no schema created\n%s%s", code, out, errs)
			}
		})
	}
}

// ledgerTables lists the run's ledger tables still in the store's database.
func ledgerTables(t *testing.T, h *dsn.Handle, runID string) []string {
	t.Helper()
	ctx := context.Background()
	pattern := "idem_demo_%" + runID
	var (
		names []string
		err   error
	)
	switch {
	case h.PG != nil:
		var rows pgx.Rows
		if rows, err = h.PG.Query(ctx, `SELECT tablename FROM pg_tables WHERE tablename LIKE $1`, pattern); err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
	case h.SQL != nil:
		q := `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?`
		if h.Scheme == "sqlite" {
			q = `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?`
		}
		var rows *sql.Rows
		if rows, err = h.SQL.QueryContext(ctx, q, pattern); err == nil {
			defer rows.Close()
			for rows.Next() {
				var n string
				if err = rows.Scan(&n); err != nil {
					break
				}
				names = append(names, n)
			}
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A run that fails (here: its --timeout runs out) still removes what it
// wrote to a named store, and the error says it was the timeout.
func TestDemoTimeoutCleansUp(t *testing.T) {
	d := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "demo.db"))
	// 200,000 orders take minutes; the timeout ends the run long before.
	code, out, errs := runCmd(t, "demo", "--store", d, "--messages", "200000", "--timeout", "1500ms", "--quiet")
	if code != exitFailure || !strings.Contains(errs, "demo timed out: --timeout 1.5s ran out") {
		t.Fatalf("exit %d, want 1 saying the timeout ran out\n%s%s", code, out, errs)
	}
	h, err := dsn.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	stats, err := h.Store.(idem.Inspector).Stats(context.Background(), time.Now())
	if err != nil || len(stats) != 0 {
		t.Errorf("records left after a failed run: %v %v", stats, err)
	}
	if tables := ledgerTables(t, h, ""); len(tables) > 0 {
		t.Errorf("ledger tables left after a failed run: %v", tables)
	}
	// Timing out before anything ran says so too.
	if code, _, errs := runCmd(t, "demo", "--timeout", "1ns"); code != exitFailure || !strings.Contains(errs, "--timeout 1ns ran out") {
		t.Errorf("--timeout 1ns: exit %d\n%s", code, errs)
	}
}

// A store or broker that does not answer fails at once, naming it and how
// to start it; a refused login says so, not that the server is down.
func TestDemoServerFailures(t *testing.T) {
	amqpURL := testenv.RabbitMQ.Need(t)
	wrong, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	wrong.User = url.UserPassword(wrong.User.Username(), "not-the-password")
	natsURL := natsWithAuth(t)
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--store", "redis://127.0.0.1:1/0"}, "no Redis server answers at redis://127.0.0.1:1/0", ""},
		{[]string{"--store", "postgres://postgres@127.0.0.1:1/test"}, "no PostgreSQL server answers at", ""},
		{[]string{"--store", "mysql://root@127.0.0.1:1/test"}, "no MariaDB/MySQL server answers at", ""},
		{[]string{"--broker", "nats://127.0.0.1:1"}, "no NATS server answers at nats://127.0.0.1:1", ""},
		{[]string{"--broker", "amqp://guest:guest@127.0.0.1:1/"}, "no RabbitMQ server answers at", ""},
		{[]string{"--broker", wrong.String()}, "login refused: RabbitMQ at", "is it running"},
		{[]string{"--broker", natsURL}, "login refused: NATS at", "is it running"},
	} {
		code, _, errs := runCmd(t, append([]string{"demo", "--messages", "10"}, tc.args...)...)
		if code != exitFailure || !strings.Contains(errs, tc.want) || (tc.not != "" && strings.Contains(errs, tc.not)) {
			t.Errorf("demo %s: exit %d, want 1 with %q\n%s", strings.Join(tc.args, " "), code, tc.want, errs)
		}
		if strings.Contains(errs, "not-the-password") || strings.Contains(errs, "s3cret") {
			t.Errorf("demo %s shows the password:\n%s", strings.Join(tc.args, " "), errs)
		}
		if tc.want != "" && strings.Contains(tc.want, "server answers") && !strings.Contains(errs, "start ") {
			t.Errorf("demo %s does not say how to start the server:\n%s", strings.Join(tc.args, " "), errs)
		}
	}
}

// natsWithAuth starts an embedded NATS server that wants a password and
// returns a URL with the wrong one.
func natsWithAuth(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, Username: "idem", Password: "right",
		NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server did not start")
	}
	u, err := url.Parse(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("idem", "s3cret")
	return u.String()
}

// The conflicts line counts order ids, never more than were sent, and
// the dead-lettered messages beside them.
func TestDemoConflictsCountIDs(t *testing.T) {
	code, out, errs := runCmd(t, "demo", "--json", "--store", "memory://", "--mode", "two-phase", "--messages", "200",
		"--conflict-rate", "0.5", "--dup-rate", "1", "--seed", "21")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	rep := decode(t, out)
	sent, ids, msgs := rep["conflicting_sent"].(float64), rep["conflicts"].(float64), rep["conflict_dead_letters"].(float64)
	if ids != sent || msgs < ids {
		t.Errorf("conflicts %v of %v sent, %v messages dead-lettered; want every reused id caught once, messages >= ids", ids, sent, msgs)
	}
	code, out, _ = runCmd(t, "demo", "--store", "memory://", "--mode", "two-phase", "--messages", "200",
		"--conflict-rate", "0.5", "--dup-rate", "1", "--seed", "21")
	if want := fmt.Sprintf("of %d ids reused with other content", int(sent)); code != exitOK || !strings.Contains(out, want) {
		t.Errorf("the conflicts line lacks %q:\n%s", want, out)
	}
}
