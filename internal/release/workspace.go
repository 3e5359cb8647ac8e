package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// workspace is the repository's go.work: its modules, in an order where a
// module comes after every sibling it requires.
type workspace struct {
	workFile string // go.work
	root     string // directory holding go.work
	rootPath string // module path of the root module, the prefix of every other
	byPath   map[string]*mod
	order    []*mod
}

// mod is one module of the workspace.
type mod struct {
	path      string   // module path
	dir       string   // slash-separated, relative to the workspace root; "." for the root module
	requires  []string // sibling modules it requires (tests included: go.mod does not tell them apart)
	published bool     // gets a tag and a place in the proxy
}

func loadWorkspace(rev string) (*workspace, error) {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOWORK: %w", err)
	}
	workFile := strings.TrimSpace(string(out))
	if workFile == "" || workFile == "off" {
		return nil, errors.New("no go.work: run the command inside the repository, with GOWORK unset")
	}
	root := filepath.Dir(workFile)
	atRev := func(name string) ([]byte, error) {
		cmd := exec.Command("git", "show", rev+":"+name)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git show %s:%s: %w", rev, name, err)
		}
		return out, nil
	}
	data, err := atRev("go.work")
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(workFile, data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{workFile: workFile, root: root, byPath: map[string]*mod{}}
	var mods []*mod
	var files []*modfile.File
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		name := path.Join(dir, "go.mod")
		data, err := atRev(name)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, err
		}
		m := &mod{path: f.Module.Mod.Path, dir: dir}
		if dir == "." {
			ws.rootPath = m.path
		}
		mods = append(mods, m)
		files = append(files, f)
		ws.byPath[m.path] = m
	}
	if ws.rootPath == "" {
		return nil, errors.New("go.work does not use the root module (.)")
	}
	requiredBy := map[string]int{}
	for i, m := range mods {
		if want := path.Join(ws.rootPath, m.dir); m.path != want {
			return nil, fmt.Errorf("module %s in %s: its path must be %s for the tag %s to name it", m.path, m.dir, want, m.tagPrefix()+"vX.Y.Z")
		}
		for _, r := range files[i].Require {
			if _, ok := ws.byPath[r.Mod.Path]; ok {
				m.requires = append(m.requires, r.Mod.Path)
				requiredBy[r.Mod.Path]++
			}
		}
	}
	// A module under internal/ that no module requires (the e2e tests, this
	// command) is of no use to anyone outside: it gets neither tag nor zip.
	for _, m := range mods {
		m.published = requiredBy[m.path] > 0 || !hasInternal(m.dir)
	}
	if ws.order, err = dependencyOrder(mods, ws.byPath); err != nil {
		return nil, err
	}
	return ws, nil
}

func hasInternal(dir string) bool {
	for _, elem := range strings.Split(dir, "/") {
		if elem == "internal" {
			return true
		}
	}
	return false
}

func readModFile(file string) (*modfile.File, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(file, data, nil)
}

// dependencyOrder sorts the modules so that each follows the siblings it
// requires; the tidy of a module needs theirs done and in the proxy. A cycle
// cannot be released (each go.sum would need the other's checksum first).
func dependencyOrder(mods []*mod, byPath map[string]*mod) ([]*mod, error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[*mod]int{}
	var order []*mod
	var visit func(m *mod, chain []string) error
	visit = func(m *mod, chain []string) error {
		switch state[m] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("modules require each other in a cycle: %s", strings.Join(append(chain, m.path), " -> "))
		}
		state[m] = visiting
		for _, r := range m.requires {
			if err := visit(byPath[r], append(chain, m.path)); err != nil {
				return err
			}
		}
		state[m] = done
		order = append(order, m)
		return nil
	}
	for _, m := range mods {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// setWorkReplaces makes go.work replace every module at version by its
// directory, and drops its replaces of siblings at other versions. In
// workspace mode the go command still reads the go.mod of each version a
// workspace module requires of another (to build the module graph), so
// between the version bump and the tags, and for ever after on a machine
// without network, the workspace needs them; go.work is no module's file, so
// no user sees them.
func (ws *workspace) setWorkReplaces(version string) error {
	data, err := os.ReadFile(ws.workFile)
	if err != nil {
		return err
	}
	wf, err := modfile.ParseWork(ws.workFile, data, nil)
	if err != nil {
		return err
	}
	for _, r := range append([]*modfile.Replace(nil), wf.Replace...) {
		if ws.byPath[r.Old.Path] != nil {
			if err := wf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	wf.Cleanup()
	var block strings.Builder
	block.WriteString("\nreplace (\n")
	for _, m := range ws.sortedByDir() {
		dir := "./" + m.dir
		if m.dir == "." {
			dir = "."
		}
		fmt.Fprintf(&block, "\t%s %s => %s\n", m.path, version, dir)
	}
	block.WriteString(")\n")
	text := strings.TrimRight(string(modfile.Format(wf.Syntax)), "\n") + "\n" + block.String()
	if wf, err = modfile.ParseWork(ws.workFile, []byte(text), nil); err != nil {
		return err
	}
	return os.WriteFile(ws.workFile, modfile.Format(wf.Syntax), 0o644)
}

func (ws *workspace) sortedByDir() []*mod {
	mods := append([]*mod(nil), ws.order...)
	sort.Slice(mods, func(i, j int) bool { return mods[i].dir < mods[j].dir })
	return mods
}

// tagPrefix is what precedes the version in the module's tag: nothing for
// the root module, its directory and a slash for the others.
func (m *mod) tagPrefix() string {
	if m.dir == "." {
		return ""
	}
	return m.dir + "/"
}

// tags lists the tags that publish version: one per published module.
func (ws *workspace) tags(version string) []string {
	var tags []string
	for _, m := range ws.sortedByDir() {
		if m.published {
			tags = append(tags, m.tagPrefix()+version)
		}
	}
	return tags
}

// pattern is the import-path pattern of every package of the workspace.
func (ws *workspace) pattern() string { return ws.rootPath + "/..." }

// stageFiles writes the files of commit rev to dir: a module zip holds what
// its tag will, not the build products, caches and other work in progress
// lying in the tree (tracked files half-edited, untracked ones not yet
// added), which change under a run on a shared tree.
func (ws *workspace) stageFiles(dir, rev string) error {
	cmd := exec.Command("git", "archive", "--format=tar", rev)
	cmd.Dir = ws.root
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("git archive %s: %w", rev, err)
		}
		name := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || name == "go.work" || name == "go.work.sum" {
			continue // a module zip holds regular files only; go.work is the repo's
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(h.Mode).Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// setVersion rewrites the go.mod in dir: every sibling requirement names
// version, the replaces of siblings are gone, and go.sum forgets the
// siblings' checksums (the tidy that follows records the new ones). Any
// other replace is an error: `go install pkg@version` refuses a go.mod
// with one, and a user's build never applies it.
func (m *mod) setVersion(ws *workspace, version, dir string) error {
	file := filepath.Join(dir, "go.mod")
	f, err := readModFile(file)
	if err != nil {
		return err
	}
	for _, r := range f.Require {
		if _, ok := ws.byPath[r.Mod.Path]; ok {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return err
			}
		}
	}
	for _, r := range append([]*modfile.Replace(nil), f.Replace...) {
		if _, ok := ws.byPath[r.Old.Path]; !ok {
			return fmt.Errorf("%s: replace %s => %s: a published go.mod can have no replace", m.path, r.Old.Path, r.New.Path)
		}
		if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return err
		}
	}
	f.Cleanup()
	data, err := f.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	return ws.dropSiblingSums(filepath.Join(dir, "go.sum"))
}

func (ws *workspace) dropSiblingSums(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var kept bytes.Buffer
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && ws.byPath[fields[0]] != nil {
			continue
		}
		kept.WriteString(line)
	}
	return os.WriteFile(file, kept.Bytes(), 0o644)
}

// copyBack writes the staged go.mod and go.sum over the tree's.
func (m *mod) copyBack(stageDir, treeDir string) error {
	for _, name := range []string{"go.mod", "go.sum"} {
		src, dst := filepath.Join(stageDir, name), filepath.Join(treeDir, name)
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		if err := copyFile(src, dst, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// standaloneEnv is the environment of a go command that must see a module
// as a user would: no workspace, idem's modules from the local proxy (and
// their checksums, which no checksum database knows yet, unchecked), every
// other module from the user's module cache or else the usual proxy.
func standaloneEnv(rootPath, proxy, modcache string) ([]string, error) {
	goEnv := func(name string) (string, error) {
		out, err := exec.Command("go", "env", name).Output()
		return strings.TrimSpace(string(out)), err
	}
	usual, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	flags, err := goEnv("GOFLAGS")
	if err != nil {
		return nil, err
	}
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	if usual != "" && usual != "off" {
		proxies += "," + usual
	}
	set := map[string]string{
		"GOWORK":     "off",
		"GOPROXY":    proxies,
		"GOMODCACHE": modcache,
		"GONOSUMDB":  rootPath,
		"GOPRIVATE":  "",
		"GONOPROXY":  "",
		"GOFLAGS":    strings.TrimSpace(flags + " -modcacherw"),
		// The go command takes a module cache directory for immutable and
		// indexes its packages in the build cache by the directory's path;
		// a version rebuilt with new content at the same path would be read
		// through the stale index (files missing, imports unresolved).
		"GODEBUG": strings.Trim(os.Getenv("GODEBUG")+",goindex=0", ","),
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !isSet(set, name) {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env, nil
}

func isSet(set map[string]string, name string) bool { _, ok := set[name]; return ok }

func runGo(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	return cmd.Run()
}
