package job_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package imports the standard library and idem only (the root
// module: idem and its internal packages).
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		// The root module's internal packages come with idem itself.
		if p != "github.com/idemgo/idem" && p != "github.com/idemgo/idem/job" && !strings.HasPrefix(p, "github.com/idemgo/idem/internal/") {
			t.Errorf("job imports %s", p)
		}
	}
}
