package testenv

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeListsEveryServer: CONTRIBUTING.md's table of test servers names
// every service with its variable and default.
func TestReadmeListsEveryServer(t *testing.T) {
	data, err := os.ReadFile("../../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "| ") && strings.Contains(l, "`IDEM_") {
			rows = append(rows, l)
		}
	}
	for _, s := range All {
		found := false
		for _, r := range rows {
			if strings.Contains(r, "`"+s.Env+"`") && (s == Mongo || strings.Contains(r, "`"+s.Default+"`")) {
				found = true
			}
		}
		if !found {
			t.Errorf("CONTRIBUTING.md's test-server table has no row for %s with `%s` and its default `%s`", s.Name, s.Env, s.Default)
		}
	}
}
