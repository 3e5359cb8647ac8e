// Command api writes and checks the API report of every library module: one
// line per exported name of its importable packages (functions with their
// signatures, types, struct fields, methods, interface methods, constants
// and variables with their types), in the format of the Go project's own
// api files. The reports are committed under api/ at the repository root,
// one file per module; they are the baseline an incompatible change is seen
// against:
//
//	go run ./internal/release/api          check: fail on a removed or changed line
//	go run ./internal/release/api -write   accept the tree's API as the baseline
//
// A line removed (or changed: the old form is removed, the new one added)
// breaks some caller and fails the check; a line only added is compatible
// and is printed as a note, so the baseline is rewritten when the addition
// is released. CI runs the check (.ci/run); before v1 an incompatible change
// is allowed, but it is seen and accepted with -write in the same commit.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

const modulePrefix = "github.com/idemgo/idem"

func main() {
	write := flag.Bool("write", false, "write the reports (accept the tree's API) instead of checking them")
	dir := flag.String("dir", "api", "the reports' directory, relative to the repository root")
	flag.Parse()
	if err := run(*write, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run(write bool, dir string) error {
	reports, err := load()
	if err != nil {
		return err
	}
	if write {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for mod, lines := range reports {
			if err := os.WriteFile(filepath.Join(dir, fileName(mod)), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				return err
			}
		}
		fmt.Printf("api: wrote %d reports to %s\n", len(reports), dir)
		return nil
	}
	// Lines are compared over every module at once: a package that moves
	// to a module of its own keeps its import path and its API (its users
	// change a requirement, not their code), so only a name gone from
	// every report breaks a caller.
	var old, cur []string
	oldIn := map[string]string{} // line -> the module whose report had it
	for _, mod := range sortedKeys(reports) {
		cur = append(cur, reports[mod]...)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("no baseline in %s (%v): run go run ./internal/release/api -write", dir, err)
	}
	for _, e := range entries {
		lines, err := readLines(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		for _, l := range lines {
			oldIn[l] = strings.TrimSuffix(e.Name(), ".txt")
		}
		old = append(old, lines...)
	}
	removed, added := diff(old, cur)
	for _, l := range removed {
		fmt.Printf("api: %s: incompatible: %s\n", oldIn[l], l)
	}
	for _, l := range added {
		fmt.Printf("api: added: %s\n", l)
	}
	broken := len(removed)
	for _, mod := range sortedKeys(reports) {
		if _, err := os.Stat(filepath.Join(dir, fileName(mod))); os.IsNotExist(err) {
			fmt.Printf("api: %s: new module, no baseline yet (go run ./internal/release/api -write)\n", mod)
		}
	}
	if broken > 0 {
		return fmt.Errorf("%d incompatible API changes against %s/ (if meant, accept them with go run ./internal/release/api -write in the same commit, and say so in CHANGELOG.md)", broken, dir)
	}
	fmt.Printf("api: %d modules, no incompatible change\n", len(reports))
	return nil
}

// load type-checks every importable package of the workspace's library
// modules and returns each module's report lines, sorted.
func load() (map[string][]string, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedModule | packages.NeedTypes}
	pkgs, err := packages.Load(cfg, modulePrefix+"/...")
	if err != nil {
		return nil, err
	}
	reports := map[string][]string{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Module == nil || !library(p.Module.Path, p.PkgPath) || p.Name == "main" {
			continue
		}
		reports[p.Module.Path] = append(reports[p.Module.Path], describe(p.Types)...)
	}
	for m := range reports {
		sort.Strings(reports[m])
	}
	return reports, nil
}

// library reports whether pkg, of module mod, is one users import: not a
// command, an example or an internal package, and not of an internal module.
func library(mod, pkg string) bool {
	rel := strings.TrimPrefix(pkg, modulePrefix)
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if part == "internal" || part == "testdata" {
			return false
		}
	}
	return !strings.HasPrefix(rel, "/cmd/") && !strings.HasPrefix(rel, "/examples") && strings.HasPrefix(mod, modulePrefix)
}

// describe returns a line for every exported name of p.
func describe(p *types.Package) []string {
	pre := "pkg " + p.Path() + ", "
	q := types.RelativeTo(p)
	var out []string
	scope := p.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Func:
			out = append(out, pre+"func "+name+sigString(o.Type().(*types.Signature), q))
		case *types.Const:
			out = append(out, pre+"const "+name+" "+types.TypeString(o.Type(), q))
		case *types.Var:
			out = append(out, pre+"var "+name+" "+types.TypeString(o.Type(), q))
		case *types.TypeName:
			out = append(out, describeType(pre, o, q)...)
		}
	}
	return out
}

func describeType(pre string, o *types.TypeName, q types.Qualifier) []string {
	name := o.Name()
	if tp := typeParams(o); tp != "" {
		name += tp
	}
	if o.IsAlias() {
		return []string{pre + "type " + name + " = " + types.TypeString(types.Unalias(o.Type()), q)}
	}
	var out []string
	under := o.Type().Underlying()
	switch u := under.(type) {
	case *types.Struct:
		out = append(out, pre+"type "+name+" struct")
		for i := range u.NumFields() {
			f := u.Field(i)
			if f.Exported() {
				emb := ""
				if f.Embedded() {
					emb = "embedded "
				}
				out = append(out, pre+"type "+name+" struct, "+emb+f.Name()+" "+types.TypeString(f.Type(), q))
			}
		}
	case *types.Interface:
		out = append(out, pre+"type "+name+" interface")
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				out = append(out, pre+"type "+name+" interface, "+m.Name()+sigString(m.Type().(*types.Signature), q))
			}
		}
		if !u.IsMethodSet() {
			out = append(out, pre+"type "+name+" interface, constraint "+types.TypeString(u, q))
		}
	default:
		out = append(out, pre+"type "+name+" "+types.TypeString(under, q))
	}
	if named, ok := o.Type().(*types.Named); ok {
		for i := range named.NumMethods() {
			m := named.Method(i)
			if !m.Exported() {
				continue
			}
			sig := m.Type().(*types.Signature)
			recv := o.Name()
			if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
				recv = "*" + recv
			}
			out = append(out, pre+"method ("+recv+") "+m.Name()+sigString(sig, q))
		}
	}
	return out
}

// sigString is sig's parameters and results without their names: renaming
// a parameter breaks no caller.
func sigString(sig *types.Signature, q types.Qualifier) string {
	list := func(t *types.Tuple, variadic bool) []string {
		var out []string
		for i := range t.Len() {
			s := types.TypeString(t.At(i).Type(), q)
			if variadic && i == t.Len()-1 {
				s = "..." + strings.TrimPrefix(s, "[]")
			}
			out = append(out, s)
		}
		return out
	}
	var tp string
	if sig.TypeParams().Len() > 0 {
		var parts []string
		for i := range sig.TypeParams().Len() {
			p := sig.TypeParams().At(i)
			parts = append(parts, p.Obj().Name()+" "+types.TypeString(p.Constraint(), q))
		}
		tp = "[" + strings.Join(parts, ", ") + "]"
	}
	s := tp + "(" + strings.Join(list(sig.Params(), sig.Variadic()), ", ") + ")"
	switch res := list(sig.Results(), false); len(res) {
	case 0:
	case 1:
		s += " " + res[0]
	default:
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}

func typeParams(o *types.TypeName) string {
	named, ok := o.Type().(*types.Named)
	if !ok || named.TypeParams().Len() == 0 {
		return ""
	}
	var parts []string
	for i := range named.TypeParams().Len() {
		tp := named.TypeParams().At(i)
		parts = append(parts, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), types.RelativeTo(o.Pkg())))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// fileName is the report's name for module mod: its directory in the
// repository, slashes as dots ("idem.txt" for the root module).
func fileName(mod string) string {
	rel := strings.Trim(strings.TrimPrefix(mod, modulePrefix), "/")
	if rel == "" {
		return "idem.txt"
	}
	return strings.ReplaceAll(rel, "/", ".") + ".txt"
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// diff returns the lines of old not in cur, and of cur not in old.
func diff(old, cur []string) (removed, added []string) {
	in := func(set []string) map[string]bool {
		m := make(map[string]bool, len(set))
		for _, l := range set {
			m[l] = true
		}
		return m
	}
	o, c := in(old), in(cur)
	for _, l := range old {
		if !c[l] {
			removed = append(removed, l)
		}
	}
	for _, l := range cur {
		if !o[l] {
			added = append(added, l)
		}
	}
	return removed, added
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
