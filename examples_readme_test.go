package idem_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeListsEveryExample: the examples row of docs/architecture.md's
// package table names every program under examples/, and each has a
// main.go.
func TestReadmeListsEveryExample(t *testing.T) {
	readme, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, "| `examples/` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("docs/architecture.md has no `examples/` row in its package table")
	}
	entries, err := os.ReadDir("examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if !strings.Contains(row, "`"+e.Name()+"`") {
			t.Errorf("docs/architecture.md's examples row does not name examples/%s", e.Name())
		}
		if _, err := os.Stat("examples/" + e.Name() + "/main.go"); err != nil {
			t.Errorf("examples/%s has no main.go", e.Name())
		}
	}
}
