package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testWorkspace() *workspace {
	ws := &workspace{rootPath: "example.com/r", byPath: map[string]*mod{}}
	for _, m := range []*mod{{path: "example.com/r", dir: "."}, {path: "example.com/r/a", dir: "a"}} {
		ws.byPath[m.path] = m
		ws.order = append(ws.order, m)
	}
	return ws
}

func TestSetVersion(t *testing.T) {
	dir := t.TempDir()
	goMod := "module example.com/r/a\n\ngo 1.26.0\n\nreplace example.com/r => ..\n\n" +
		"require (\n\texample.com/r v0.0.0-00010101000000-000000000000\n\texample.com/x v1.2.3\n)\n"
	goSum := "example.com/r v0.1.0 h1:old=\nexample.com/r v0.1.0/go.mod h1:old=\nexample.com/x v1.2.3 h1:x=\n"
	write(t, filepath.Join(dir, "go.mod"), goMod)
	write(t, filepath.Join(dir, "go.sum"), goSum)
	ws := testWorkspace()
	if err := ws.byPath["example.com/r/a"].setVersion(ws, "v0.2.0", dir); err != nil {
		t.Fatal(err)
	}
	gotMod := read(t, filepath.Join(dir, "go.mod"))
	if strings.Contains(gotMod, "replace") || !strings.Contains(gotMod, "example.com/r v0.2.0") || !strings.Contains(gotMod, "example.com/x v1.2.3") {
		t.Errorf("go.mod:\n%s", gotMod)
	}
	if got, want := read(t, filepath.Join(dir, "go.sum")), "example.com/x v1.2.3 h1:x=\n"; got != want {
		t.Errorf("go.sum = %q, want %q (sibling checksums dropped, others kept)", got, want)
	}
}

func TestSetVersionRefusesForeignReplace(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module example.com/r/a\n\ngo 1.26.0\n\nreplace example.com/x => ../x\n")
	ws := testWorkspace()
	err := ws.byPath["example.com/r/a"].setVersion(ws, "v0.2.0", dir)
	if err == nil || !strings.Contains(err.Error(), "example.com/x") {
		t.Fatalf("err = %v, want one naming the replace of example.com/x", err)
	}
}

func TestDependencyOrder(t *testing.T) {
	a := &mod{path: "a", requires: []string{"b"}}
	b := &mod{path: "b", requires: []string{"c"}}
	c := &mod{path: "c"}
	byPath := map[string]*mod{"a": a, "b": b, "c": c}
	order, err := dependencyOrder([]*mod{a, b, c}, byPath)
	if err != nil {
		t.Fatal(err)
	}
	if order[0] != c || order[1] != b || order[2] != a {
		t.Errorf("order = %s %s %s, want c b a", order[0].path, order[1].path, order[2].path)
	}
	c.requires = []string{"a"}
	if _, err := dependencyOrder([]*mod{a, b, c}, byPath); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("err = %v, want a cycle", err)
	}
}

func write(t *testing.T, file, text string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
