// Command release sets one version on every module of the workspace and
// checks that the result can be fetched as a user would fetch it.
//
//	go run ./internal/release [-test] [-proxy DIR] [-tree=false] vX.Y.Z
//
// It rewrites each module's go.mod so that its requirements of sibling
// modules name vX.Y.Z and no replace directive is left (go.work is how the
// repository builds locally; a replace in a published go.mod breaks
// `go install pkg@version` and is ignored by every user). Modules are then
// tidied one at a time, in dependency order, outside the workspace, each
// against a module proxy directory holding the siblings already done, so
// every go.sum is complete for a build without go.work and names the
// siblings' real checksums at vX.Y.Z. With -tree (the default) the go.mod
// and go.sum files are written back, go.work replaces each module at vX.Y.Z
// by its directory (the workspace builds before the tags exist, and without
// network after), the workspace is built and vetted
// (and tested with -test), a CHANGELOG.md entry is added and the tags to
// create are printed. With -tree=false the tree is left alone and only the
// proxy directory is written: CI installs from it (.ci/install).
//
// The downloads of idem's own modules go to a module cache of the command's
// own (-modcache), never to the user's: a version fetched from the local
// proxy before it is tagged must not shadow the real one later. The cache
// keeps its third-party modules from run to run (extracting them again is
// most of a cold run's time) and is purged of idem's modules at each start
// and end, so no run sees another run's zip at the same version.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
)

func main() {
	var opt options
	flag.StringVar(&opt.proxy, "proxy", "", "write a module proxy directory (GOPROXY=file://DIR layout) here; default a temporary one, removed at the end")
	flag.StringVar(&opt.modcache, "modcache", "", "module cache of the standalone go commands, kept for its third-party modules, purged of idem's at each start; default idem/release-modcache in the user's cache directory")
	flag.BoolVar(&opt.tree, "tree", true, "write go.mod/go.sum back to the tree, check the workspace, add a CHANGELOG entry; false: write the proxy only")
	flag.BoolVar(&opt.test, "test", false, "also run the workspace's tests after build and vet")
	flag.StringVar(&opt.rev, "rev", "HEAD", "the commit whose files are released (commit the go.mod edits first: the tree's uncommitted work is not taken)")
	flag.StringVar(&opt.tagsFile, "tags", "", "also write the tags to create to this file, one a line")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./internal/release [flags] vX.Y.Z")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	opt.version = flag.Arg(0)
	if err := run(opt); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

type options struct {
	version  string
	proxy    string
	modcache string
	tree     bool
	test     bool
	tagsFile string
	rev      string
}

func run(opt options) error {
	if !semver.IsValid(opt.version) || semver.Canonical(opt.version) != opt.version || semver.Build(opt.version) != "" {
		return fmt.Errorf("%q is not a canonical semantic version (vX.Y.Z or vX.Y.Z-pre)", opt.version)
	}
	if major := semver.Major(opt.version); major != "v0" && major != "v1" {
		return fmt.Errorf("%s needs /%s module paths, which idem's modules do not have", opt.version, major)
	}
	ws, err := loadWorkspace(opt.rev)
	if err != nil {
		return err
	}
	if opt.tree {
		// The go.mod and go.sum files written back come from rev: an edit
		// of one in the tree, not yet committed, would be lost.
		cmd := exec.Command("git", "diff", "--name-only", opt.rev, "--", "*go.mod", "*go.sum")
		cmd.Dir = ws.root
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("git diff %s: %w", opt.rev, err)
		}
		if changed := strings.Fields(string(out)); len(changed) > 0 {
			return fmt.Errorf("these files differ from %s; commit them first (the release rewrites them from %s): %s", opt.rev, opt.rev, strings.Join(changed, " "))
		}
	}
	tmp, err := os.MkdirTemp("", "idem-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if opt.proxy == "" {
		opt.proxy = filepath.Join(tmp, "proxy")
	}
	if opt.modcache == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("no cache directory for the module cache (give -modcache): %w", err)
		}
		opt.modcache = filepath.Join(cache, "idem", "release-modcache")
	}
	if opt.proxy, err = filepath.Abs(opt.proxy); err != nil {
		return err
	}
	if opt.modcache, err = filepath.Abs(opt.modcache); err != nil {
		return err
	}

	if err := purgeModcache(opt.modcache, ws.rootPath); err != nil {
		return err
	}
	defer purgeModcache(opt.modcache, ws.rootPath)

	stage := filepath.Join(tmp, "stage")
	if err := ws.stageFiles(stage, opt.rev); err != nil {
		return err
	}
	env, err := standaloneEnv(ws.rootPath, opt.proxy, opt.modcache)
	if err != nil {
		return err
	}
	for _, m := range ws.order {
		dir := filepath.Join(stage, filepath.FromSlash(m.dir))
		if err := m.setVersion(ws, opt.version, dir); err != nil {
			return err
		}
		if err := runGo(dir, env, "mod", "tidy"); err != nil {
			return fmt.Errorf("%s: go mod tidy outside the workspace: %w", m.path, err)
		}
		if m.published {
			if err := addToProxy(opt.proxy, m.path, opt.version, dir); err != nil {
				return fmt.Errorf("%s: %w", m.path, err)
			}
		}
	}
	tags := ws.tags(opt.version)
	if opt.tagsFile != "" {
		if err := os.WriteFile(opt.tagsFile, []byte(strings.Join(tags, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	if !opt.tree {
		fmt.Printf("release: proxy for %s in %s (%d modules)\n", opt.version, opt.proxy, len(tags))
		return nil
	}

	for _, m := range ws.order {
		if err := m.copyBack(filepath.Join(stage, filepath.FromSlash(m.dir)), filepath.Join(ws.root, filepath.FromSlash(m.dir))); err != nil {
			return err
		}
	}
	if err := ws.setWorkReplaces(opt.version); err != nil {
		return err
	}
	checks := [][]string{{"build", ws.pattern()}, {"vet", ws.pattern()}}
	if opt.test {
		checks = append(checks, []string{"test", "-count=1", ws.pattern()})
	}
	for _, args := range checks {
		fmt.Println("release: go", strings.Join(args, " "))
		if err := runGo(ws.root, nil, args...); err != nil {
			return fmt.Errorf("the workspace at %s: go %s: %w", opt.version, args[0], err)
		}
	}
	if err := addChangelogEntry(filepath.Join(ws.root, "CHANGELOG.md"), opt.version, tags); err != nil {
		return err
	}
	fmt.Printf("release: every module requires its siblings at %s, no replace left; create these tags on the commit of this change:\n", opt.version)
	for _, t := range tags {
		fmt.Println("git tag", t)
	}
	return nil
}
