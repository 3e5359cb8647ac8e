package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

const unreleased = "## Unreleased"

// addChangelogEntry turns the "## Unreleased" section of the changelog (the
// changes written there as they were made) into the entry of version, headed
// by the tags it creates, and leaves an empty Unreleased section above it.
// Run again on the same version (the bump is committed before the tagged
// commit, and work may land between), it moves what Unreleased gained into
// that entry and dates it again.
func addChangelogEntry(file, version string, tags []string) error {
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text := string(data)
	if text == "" {
		text = "# Changelog\n\n" + unreleased + "\n"
	}
	preamble, sections := splitSections(text)
	heading := "## " + version
	var body []string
	var rest []string
	found := false
	for _, s := range sections {
		switch title := firstLine(s); {
		case title == unreleased:
			found = true
			body = append(body, sectionBody(s))
		case title == heading || strings.HasPrefix(title, heading+" "):
			body = append(body, dropTags(sectionBody(s)))
		default:
			rest = append(rest, s)
		}
	}
	if !found {
		return fmt.Errorf("CHANGELOG.md has no %q section to release", unreleased)
	}
	var b strings.Builder
	b.WriteString(preamble)
	fmt.Fprintf(&b, "%s\n\n%s (%s)\n\n", unreleased, heading, time.Now().UTC().Format("2006-01-02"))
	b.WriteString(wrap("Tags: `"+strings.Join(tags, "`, `")+"`.", 100))
	for _, part := range body {
		if part != "" {
			b.WriteString("\n" + part + "\n")
		}
	}
	for _, s := range rest {
		b.WriteString("\n" + strings.TrimRight(s, "\n") + "\n")
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// splitSections cuts a changelog at its "## " headings: the text before the
// first, and each section from its heading on.
func splitSections(text string) (string, []string) {
	lines := strings.SplitAfter(text, "\n")
	var preamble strings.Builder
	var sections []string
	var cur *strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "## ") {
			if cur != nil {
				sections = append(sections, cur.String())
			}
			cur = &strings.Builder{}
		}
		if cur == nil {
			preamble.WriteString(l)
		} else {
			cur.WriteString(l)
		}
	}
	if cur != nil {
		sections = append(sections, cur.String())
	}
	return preamble.String(), sections
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func sectionBody(s string) string {
	_, body, _ := strings.Cut(s, "\n")
	return strings.Trim(body, "\n")
}

// dropTags removes the "Tags: ..." paragraph an earlier run wrote.
func dropTags(body string) string {
	if !strings.HasPrefix(body, "Tags: ") {
		return body
	}
	_, rest, _ := strings.Cut(body, "\n\n")
	return strings.Trim(rest, "\n")
}

// wrap breaks text into lines of at most width columns, at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for _, word := range strings.Fields(text) {
		if line > 0 && line+1+len(word) > width {
			b.WriteString("\n")
			line = 0
		}
		if line > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String() + "\n"
}
