package main

import (
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	old := []string{"pkg p, func A()", "pkg p, func B(int)"}
	cur := []string{"pkg p, func A()", "pkg p, func B(int, string)", "pkg p, func C()"}
	removed, added := diff(old, cur)
	if !slices.Equal(removed, []string{"pkg p, func B(int)"}) {
		t.Fatalf("removed %q: a changed signature is an incompatible change", removed)
	}
	if !slices.Equal(added, []string{"pkg p, func B(int, string)", "pkg p, func C()"}) {
		t.Fatalf("added %q", added)
	}
}

func TestLibrary(t *testing.T) {
	for pkg, want := range map[string]bool{
		"github.com/idemgo/idem":                   true,
		"github.com/idemgo/idem/store/storekit":    true,
		"github.com/idemgo/idem/broker/nats":       true,
		"github.com/idemgo/idem/internal/testenv":  false,
		"github.com/idemgo/idem/outbox/internal/x": false,
		"github.com/idemgo/idem/cmd/idem":          false,
		"github.com/idemgo/idem/examples/etl-load": false,
	} {
		if got := library("github.com/idemgo/idem", pkg); got != want {
			t.Errorf("library(%s) = %v", pkg, got)
		}
	}
	if fileName("github.com/idemgo/idem") != "idem.txt" || fileName("github.com/idemgo/idem/store/postgres") != "store.postgres.txt" {
		t.Fatal("report file names")
	}
}
