package integration_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// idem.New(entity.NewStore(db), ...) and idem.New(entitypgx.NewStore(pool),
// ...) do not compile, while the same programs with idem.NewInbox do: the
// go tool builds both from overlay files (nothing is written to the tree).
func TestNewDoesNotCompileWithEntityStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go tool")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	src := func(ctor string) string {
		return `package p

import (
	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity"
	"github.com/idemgo/idem/entity/entitypgx"
)

var _ = entity.NewStore
var _ = entitypgx.NewStore

func f() { _, _ = ` + ctor + ` }
`
	}
	build := func(pkgs map[string]string) (string, error) {
		t.Helper()
		dir := t.TempDir()
		replace := map[string]string{}
		var args []string
		for name, code := range pkgs {
			file := filepath.Join(dir, name+".go")
			if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			virtual, err := filepath.Abs(filepath.Join("zz_compilecheck", name, "p.go"))
			if err != nil {
				t.Fatal(err)
			}
			replace[virtual] = file
			args = append(args, "./zz_compilecheck/"+name)
		}
		overlay, err := json.Marshal(map[string]any{"Replace": replace})
		if err != nil {
			t.Fatal(err)
		}
		ov := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(gobin, append([]string{"build", "-overlay", ov}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := build(map[string]string{
		"inboxsql": src(`idem.NewInbox(entity.NewStore(nil, nil), idem.Options{Scope: "orders"})`),
		"inboxpgx": src(`idem.NewInbox(entitypgx.NewStore(nil), idem.Options{Scope: "orders"})`),
	}); err != nil {
		t.Fatalf("idem.NewInbox over the entity stores does not compile: %v\n%s", err, out)
	}
	out, err := build(map[string]string{
		"newsql": src(`idem.New(entity.NewStore(nil, nil), idem.Options{Scope: "orders"})`),
		"newpgx": src(`idem.New(entitypgx.NewStore(nil), idem.Options{Scope: "orders"})`),
	})
	if err == nil {
		t.Fatal("idem.New(entity.NewStore(...)) compiles")
	}
	for _, want := range []string{
		"*entity.Store does not implement idem.Store",
		"*entitypgx.Store does not implement idem.Store",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the build failed without %q:\n%s", want, out)
		}
	}
}
