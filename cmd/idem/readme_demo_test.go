package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestREADMEDemoOutput: the README's demo block is what `idem demo --seed 42`
// prints. The figures the seed decides (what the producer publishes, the
// orders, the ids reused, what idem applies, the verdict) must match exactly;
// those that depend on how the consumers interleave (the chaos tally,
// duplicates, the naive consumer's ledger, the elapsed time) must have the
// same shape, any number in their place.
func TestREADMEDemoOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo (4000 orders)")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```\n\\$ go run \\./cmd/idem demo --seed 42\n(.*?)\n```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no block starting with `$ go run ./cmd/idem demo --seed 42`")
	}
	want := strings.Split(string(block[1]), "\n")

	code, out, stderr := runCmd(t, "demo", "--seed", "42", "--quiet")
	if code != 0 {
		t.Fatalf("idem demo --seed 42: exit %d\n%s\n%s", code, out, stderr)
	}
	got := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("the demo printed %d lines, the README shows %d:\n%s\nREADME:\n%s", len(got), len(want), out, block[1])
	}
	digits := regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	exact := []string{"published", "unique orders", "conflicts dead-lettered", "charges applied by idem", "exactly-once invariant"}
	for i := range got {
		g, w := got[i], want[i]
		label := strings.TrimSpace(strings.SplitN(strings.TrimSpace(w), "  ", 2)[0])
		isExact := slices.Contains(exact, label)
		switch {
		case isExact && label == "conflicts dead-lettered":
			// The count and the ids are the seed's; how many messages
			// carried the losing versions depends on the retries' timing.
			cut := func(s string) string { before, _, _ := strings.Cut(s, ";"); return before }
			if cut(g) != cut(w) || digits.ReplaceAllString(g, "N") != digits.ReplaceAllString(w, "N") {
				t.Errorf("line %d: the demo printed\n%q\nthe README shows\n%q", i+1, g, w)
			}
		case isExact:
			if g != w {
				t.Errorf("line %d: the demo printed\n%q\nthe README shows\n%q", i+1, g, w)
			}
		default:
			// Numbers change width: compare with runs of blanks folded.
			norm := func(s string) string {
				return strings.Join(strings.Fields(digits.ReplaceAllString(s, "N")), " ")
			}
			if norm(g) != norm(w) {
				t.Errorf("line %d: the demo printed\n%q\nthe README shows a line of another shape\n%q", i+1, g, w)
			}
		}
	}
}
