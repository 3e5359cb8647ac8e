package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// addToProxy writes the module in dir at version into a module proxy
// directory in the layout GOPROXY=file://DIR reads: <module>/@v/list,
// <version>.info, .mod and .zip. The zip is made by golang.org/x/mod/zip,
// the code the go command itself checks zips with, so it holds exactly what
// a fetch of the tag from the real proxy would.
func addToProxy(proxy, modPath, version, dir string) error {
	escPath, err := module.EscapePath(modPath)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(vdir, escVersion)

	zf, err := os.Create(base + ".zip.tmp")
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: modPath, Version: version}, dir); err != nil {
		zf.Close()
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	if err := os.Rename(base+".zip.tmp", base+".zip"); err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", goMod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}
	return addToList(filepath.Join(vdir, "list"), version)
}

// purgeModcache removes every version of idem's modules from a module
// cache: the extracted trees (<root>@v, <root>/<sub>@v) and the downloads.
func purgeModcache(modcache, rootPath string) error {
	esc, err := module.EscapePath(rootPath)
	if err != nil {
		return err
	}
	extracted := filepath.Join(modcache, filepath.FromSlash(esc))
	matches, err := filepath.Glob(extracted + "@*")
	if err != nil {
		return err
	}
	for _, dir := range append(matches, extracted, filepath.Join(modcache, "cache", "download", filepath.FromSlash(esc))) {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return nil
}

func addToList(file, version string) error {
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(data))
	for _, v := range versions {
		if v == version {
			return nil
		}
	}
	versions = append(versions, version)
	sort.Slice(versions, func(i, j int) bool { return semver.Compare(versions[i], versions[j]) < 0 })
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}
