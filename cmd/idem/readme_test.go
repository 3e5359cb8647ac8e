package main

import (
	"os"
	"strings"
	"testing"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// docs/operations.md lists every DSN form and parameter the commands' --help
// does, and the README says how to install the command.
func TestREADMEListsDSNForms(t *testing.T) {
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The forms are the lines indented by two spaces in the first part of
	// dsn.Forms, the parameters those of the part that lists them.
	forms, rest, _ := strings.Cut(dsn.Forms, "Parameters idem reads:")
	params, _, _ := strings.Cut(rest, "\n\n")
	var want []string
	for _, part := range []string{forms, params} {
		for _, line := range strings.Split(part, "\n") {
			if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
				want = append(want, strings.Fields(line)[0])
			}
		}
	}
	if len(want) != 17 {
		t.Fatalf("found %d forms and parameters in dsn.Forms, want 17: %q", len(want), want)
	}
	for _, w := range want {
		if !strings.Contains(string(ops), "`"+w+"`") {
			t.Errorf("docs/operations.md lacks the DSN form or parameter `%s`", w)
		}
	}
	if !strings.Contains(string(readme), "go install github.com/idemgo/idem/cmd/idem@latest") {
		t.Error("README.md does not say how to install the idem command")
	}
}
