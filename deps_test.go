package idem_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the root package free of dependencies: everything that
// touches a database, broker or SDK lives in a leaf package. Its own
// internal packages are no dependency (the list is transitive, so theirs
// would show).
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/idemgo/idem" && !strings.HasPrefix(p, "github.com/idemgo/idem/internal/") {
			t.Errorf("root package imports non-standard package %s", p)
		}
	}
}
