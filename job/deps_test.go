package job_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The package imports the standard library and idem only.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/idemgo/idem" && p != "github.com/idemgo/idem/job" {
			t.Errorf("job imports %s", p)
		}
	}
}
