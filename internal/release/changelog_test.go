package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestChangelogEntry(t *testing.T) {
	today := time.Now().UTC().Format("2006-01-02")
	tags := []string{"v0.2.0", "store/postgres/v0.2.0"}
	cases := []struct {
		name, before, want string
	}{{
		name:   "unreleased becomes the entry",
		before: "# Changelog\n\nIntro.\n\n## Unreleased\n\n- new thing\n\n## v0.1.0 (2026-01-01)\n\n- old thing\n",
		want: "# Changelog\n\nIntro.\n\n## Unreleased\n\n## v0.2.0 (" + today + ")\n\n" +
			"Tags: `v0.2.0`, `store/postgres/v0.2.0`.\n\n- new thing\n\n## v0.1.0 (2026-01-01)\n\n- old thing\n",
	}, {
		name: "a second run on the version takes what Unreleased gained",
		before: "# Changelog\n\n## Unreleased\n\n- later fix\n\n## v0.2.0 (2026-01-02)\n\n" +
			"Tags: `v0.2.0`,\n`store/postgres/v0.2.0`.\n\n- new thing\n",
		want: "# Changelog\n\n## Unreleased\n\n## v0.2.0 (" + today + ")\n\n" +
			"Tags: `v0.2.0`, `store/postgres/v0.2.0`.\n\n- later fix\n\n- new thing\n",
	}, {
		name:   "no changelog yet",
		before: "",
		want:   "# Changelog\n\n## Unreleased\n\n## v0.2.0 (" + today + ")\n\nTags: `v0.2.0`, `store/postgres/v0.2.0`.\n",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "CHANGELOG.md")
			if c.before != "" {
				if err := os.WriteFile(file, []byte(c.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := addChangelogEntry(file, "v0.2.0", tags); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

func TestChangelogWithoutUnreleased(t *testing.T) {
	file := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(file, []byte("# Changelog\n\n## v0.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := addChangelogEntry(file, "v0.2.0", []string{"v0.2.0"})
	if err == nil || !strings.Contains(err.Error(), "Unreleased") {
		t.Fatalf("err = %v, want one naming the missing Unreleased section", err)
	}
}
