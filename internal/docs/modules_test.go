package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The modules of go.work, as directories relative to the root.
func workModules(t *testing.T) []string {
	t.Helper()
	var mods []string
	in := false
	for _, l := range strings.Split(readRoot(t, "go.work"), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "use (":
			in = true
		case in && l == ")":
			in = false
		case in && l != "":
			mods = append(mods, strings.TrimPrefix(strings.TrimPrefix(l, "./"), "."))
		}
	}
	if len(mods) < 10 {
		t.Fatalf("go.work uses %d modules: its use block was not read", len(mods))
	}
	return mods
}

// isLibrary: a module a user imports (not a program, a test-only module or
// the root, which every page's go get names anyway).
func isLibrary(dir string) bool {
	if dir == "" || dir == "examples" || strings.HasPrefix(dir, "cmd/") || dir == "store/storetest/lincheck/stores" {
		return false
	}
	return !slices.Contains(strings.Split(dir, "/"), "internal")
}

// The adapters and stores a reader picks: the broker and store modules but
// the conformance suites, and store/memory (a package of the root module).
func adaptersAndStores(t *testing.T) (brokers, stores []string) {
	for _, m := range workModules(t) {
		if !isLibrary(m) {
			continue
		}
		if strings.Count(m, "/") != 1 {
			continue // a module beside an adapter or a store, such as broker/eventhubs/checkpointstore
		}
		switch {
		case strings.HasPrefix(m, "broker/") && m != "broker/brokertest":
			brokers = append(brokers, strings.TrimPrefix(m, "broker/"))
		case strings.HasPrefix(m, "store/") && !strings.HasPrefix(m, "store/storetest"):
			stores = append(stores, strings.TrimPrefix(m, "store/"))
		}
	}
	return brokers, append(stores, "memory")
}

var goGet = regexp.MustCompile(`go get (github\.com/idemgo/idem(?:/[a-z0-9/]+)?)`)

// TestModuleTables: the README has one row per broker adapter and per store
// of go.work, each linking to its guide (which exists) and showing its go
// get line; no guide or row names a module that does not exist; and every
// go get line of the pages names a module of go.work.
func TestModuleTables(t *testing.T) {
	readme := readRoot(t, "README.md")
	lines, _ := prose(readme)
	brokers, stores := adaptersAndStores(t)
	for kind, names := range map[string][]string{"brokers": brokers, "stores": stores} {
		for _, name := range names {
			guide := fmt.Sprintf("docs/%s/%s.md", kind, name)
			if _, err := os.Stat(filepath.Join(root, guide)); err != nil {
				t.Errorf("%s has no guide: %s is missing", name, guide)
			}
			get := fmt.Sprintf("`go get github.com/idemgo/idem/%s/%s`", strings.TrimSuffix(kind, "s"), name)
			if name == "memory" {
				get = "`go get github.com/idemgo/idem`"
			}
			found := false
			for _, l := range lines {
				if strings.HasPrefix(l.text, "|") && strings.Contains(l.text, "("+guide+")") && strings.Contains(l.text, get) {
					found = true
				}
			}
			if !found {
				t.Errorf("README.md has no table row linking %s with %s", guide, get)
			}
		}
		guides, _ := filepath.Glob(filepath.Join(root, "docs", kind, "*.md"))
		for _, g := range guides {
			if name := strings.TrimSuffix(filepath.Base(g), ".md"); !slices.Contains(names, name) {
				t.Errorf("docs/%s/%s.md is the guide of no module of go.work", kind, filepath.Base(g))
			}
		}
	}
	mods := map[string]bool{}
	for _, m := range workModules(t) {
		mods["github.com/idemgo/idem"+map[bool]string{true: "", false: "/" + m}[m == ""]] = true
	}
	for _, f := range markdownFiles(t) {
		for _, m := range goGet.FindAllStringSubmatch(readRoot(t, f), -1) {
			if !mods[m[1]] {
				t.Errorf("%s: go get %s names no module of go.work", f, m[1])
			}
		}
	}
}

// TestPackageTable: the package table (the one whose header is | package |
// what it does |; its rows' first cells: a backquoted directory) names
// directories that hold Go packages, and every library module of go.work.
func TestPackageTable(t *testing.T) {
	var all []line
	for _, f := range markdownFiles(t) {
		lines, _ := prose(readRoot(t, f))
		all = append(all, lines...)
	}
	var rows []string
	for _, tb := range tables(all) {
		if len(tb.header) == 2 && strings.TrimSpace(tb.header[0]) == "package" {
			for _, r := range tb.rows {
				c := strings.TrimSpace(cells(r.text)[0])
				dir, _, _ := strings.Cut(strings.Trim(c, "`"), "`")
				rows = append(rows, dir)
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("no page has a table whose header is | package | what it does |")
	}
	for _, dir := range rows {
		d := strings.TrimSuffix(dir, "/")
		if d == "idem" {
			d = "."
		}
		gofiles, _ := filepath.Glob(filepath.Join(root, d, "*.go"))
		if info, err := os.Stat(filepath.Join(root, d)); strings.HasSuffix(dir, "/") && err == nil && info.IsDir() {
			continue // a directory of programs, such as examples/
		}
		if len(gofiles) == 0 {
			t.Errorf("the package table names %s, which holds no Go package", dir)
		}
	}
	for _, m := range workModules(t) {
		if !isLibrary(m) || m == "" {
			continue
		}
		if !slices.Contains(rows, m) && !slices.Contains(rows, m+"/") {
			t.Errorf("the package table has no row for the module %s", m)
		}
	}
}
