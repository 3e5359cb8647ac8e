package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// Every command that takes a store lists every DSN form and the parameters
// idem reads, so nobody has to read the source to find ?table=.
func TestHelpListsDSNForms(t *testing.T) {
	want := []string{"memory://", "sqlite://PATH", "postgres://USER[:PASS]@HOST[:PORT]/DB", "mysql://USER[:PASS]@HOST[:PORT]/DB",
		"redis://[USER:PASS@]HOST[:PORT]", "table=T", "prefix=P", "partitions=N", "sync=normal"}
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}, {"migrate", "--help"}, {"list", "--help"}, {"show", "--help"},
		{"resolve", "--help"}, {"sweep", "--help"}, {"stats", "--help"}, {"bench", "--help"}} {
		code, out, _ := runCmd(t, args...)
		if code != exitOK {
			t.Fatalf("idem %s: exit %d", strings.Join(args, " "), code)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("idem %s lacks %q", strings.Join(args, " "), w)
			}
		}
	}
}

// stats on a DSN that lacks the ?table= of the records it should read is
// told to add it, not to migrate an empty table beside them; a DSN naming a
// table that does not exist yet is told to migrate with that very DSN.
func TestStatsAdvisesTheTable(t *testing.T) {
	base := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "app.db"))
	custom := base + "?table=billing_inbox"
	if code, out, errs := runCmd(t, "migrate", "--store", custom); code != exitOK {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	code, _, errs := runCmd(t, "stats", "--store", base)
	if code != exitFailure || !strings.Contains(errs, "--store '"+custom+"'") || strings.Contains(errs, "create it with") {
		t.Errorf("stats without ?table=: exit %d, want 1 advising %s and no migrate:\n%s", code, custom, errs)
	}
	if code, out, errs := runCmd(t, "stats", "--store", custom); code != exitOK || !strings.Contains(out, "table billing_inbox") {
		t.Errorf("stats with ?table=: exit %d\n%s%s", code, out, errs)
	}
	other := base + "?sync=normal&table=mailer_inbox"
	code, _, errs = runCmd(t, "stats", "--store", other)
	if code != exitFailure || !strings.Contains(errs, "idem migrate --store '"+other+"'") {
		t.Errorf("stats on a table not migrated: exit %d, want 1 advising migrate with the DSN as given:\n%s", code, errs)
	}
}

// A store whose server does not answer fails at once, naming the store and
// how to start it.
func TestStoreUnreachable(t *testing.T) {
	for _, d := range []string{"redis://127.0.0.1:1/0", "postgres://postgres@127.0.0.1:1/test?sslmode=disable", "mysql://root@127.0.0.1:1/test"} {
		h, err := dsn.Open(t.Context(), d)
		if err != nil {
			t.Fatal(err)
		}
		name := h.Name
		h.Close()
		for _, cmd := range []string{"stats", "migrate"} {
			code, _, errs := runCmd(t, cmd, "--store", d)
			if code != exitFailure || !strings.Contains(errs, "no "+name+" server answers at") || !strings.Contains(errs, "start one with: ") {
				t.Errorf("idem %s --store %s: exit %d, want 1 naming %s and how to start it:\n%s", cmd, d, code, name, errs)
			}
		}
	}
}

// A store command whose --timeout runs out says it was the timeout.
func TestStoreCommandTimeout(t *testing.T) {
	d := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "idem.db"))
	code, _, errs := runCmd(t, "migrate", "--store", d, "--timeout", "1ns")
	if code != exitFailure || !strings.Contains(errs, "--timeout 1ns ran out") {
		t.Errorf("migrate --timeout 1ns: exit %d, want 1 saying the timeout ran out:\n%s", code, errs)
	}
}
