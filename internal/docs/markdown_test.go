package docs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The repository's root, from this package's directory.
const root = "../.."

// markdownFiles: the pages these tests keep true, relative to the root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, f := range []string{"README.md", "CONTRIBUTING.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if os.IsNotExist(err) && p == filepath.Join(root, "docs") {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func readRoot(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A line of a page outside its fenced code blocks, with its number.
type line struct {
	n    int
	text string
}

// prose splits a page into the lines outside fenced code blocks and the
// fenced blocks themselves (info string, body).
func prose(page string) (lines []line, fences [][2]string) {
	var fence, info string
	var body []string
	for i, l := range strings.Split(page, "\n") {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			info = strings.TrimSpace(trimmed[3:])
			body = nil
		case fence != "" && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed) == fence:
			fences = append(fences, [2]string{info, strings.Join(body, "\n")})
			fence = ""
		case fence != "":
			body = append(body, l)
		default:
			lines = append(lines, line{i + 1, l})
		}
	}
	return lines, fences
}

// The compiled blocks: each _test.go file of this package holds page blocks
// between a "// block: NAME" line and a "// block end" line, at any
// indentation; the block is what lies between, less that indentation.
var blockMarks = regexp.MustCompile(`(?ms)^([ \t]*)// block: ([a-z0-9-]+)\n(.*?)\n[ \t]*// block end$`)

func compiledBlocks(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range blockMarks.FindAllSubmatch(src, -1) {
			indent, name := string(m[1]), string(m[2])
			if _, dup := blocks[name]; dup {
				t.Errorf("%s: a second block named %s", f, name)
			}
			var lines []string
			for _, l := range strings.Split(string(m[3]), "\n") {
				lines = append(lines, strings.TrimPrefix(l, indent))
			}
			blocks[name] = strings.Join(lines, "\n")
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no compiled blocks found")
	}
	return blocks
}

// TestGoBlocksCompiled: every Go block of the pages is one that a test of
// this package compiles, as it is there; and every compiled block is shown
// by some page (none is left to drift unseen).
func TestGoBlocksCompiled(t *testing.T) {
	blocks := compiledBlocks(t)
	byText := map[string]string{}
	for name, b := range blocks {
		byText[b] = name
	}
	shown := map[string]bool{}
	for _, f := range markdownFiles(t) {
		if f == "CONTRIBUTING.md" {
			continue
		}
		_, fences := prose(readRoot(t, f))
		for _, fc := range fences {
			if fc[0] != "go" {
				continue
			}
			name, ok := byText[fc[1]]
			if !ok {
				t.Errorf("%s: this Go block is not compiled (copy it between // block: NAME and // block end in a _test.go file of internal/docs):\n%s", f, fc[1])
				continue
			}
			shown[name] = true
		}
	}
	for name := range blocks {
		if !shown[name] {
			t.Errorf("the compiled block %s is shown by no page (README.md, docs/)", name)
		}
	}
}

// cells splits a table row into its cells as GitHub does: on every pipe not
// escaped with a backslash, code spans included.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) {
		row = row[:len(row)-1]
	}
	var out []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case row[i] == '|':
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(out, cur.String())
}

var delimiterRow = regexp.MustCompile(`^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$`)

// A table: its header's line number, the header's cells and the rows'.
type table struct {
	line   int
	header []string
	rows   []line
}

func tables(lines []line) []table {
	var out []table
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(strings.TrimSpace(lines[i].text), "|") || !delimiterRow.MatchString(strings.TrimSpace(lines[i+1].text)) || lines[i+1].n != lines[i].n+1 {
			continue
		}
		tb := table{line: lines[i].n, header: cells(lines[i].text)}
		j := i + 2
		for ; j < len(lines) && lines[j].n == lines[j-1].n+1 && strings.HasPrefix(strings.TrimSpace(lines[j].text), "|"); j++ {
			tb.rows = append(tb.rows, lines[j])
		}
		out = append(out, tb)
		i = j - 1
	}
	return out
}

// TestTableColumns: every row of every table has its header's column count
// (GitHub drops a row's extra cells and leaves missing ones empty, silently).
func TestTableColumns(t *testing.T) {
	for _, f := range markdownFiles(t) {
		lines, _ := prose(readRoot(t, f))
		for _, tb := range tables(lines) {
			for _, r := range tb.rows {
				if n := len(cells(r.text)); n != len(tb.header) {
					first := cells(r.text)[0]
					t.Errorf("%s:%d: a row of %d cells in a table of %d columns (the table at line %d): %s", f, r.n, n, len(tb.header), tb.line, strings.TrimSpace(first))
				}
			}
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces made hyphens.
func slug(heading string) string {
	heading = strings.ReplaceAll(heading, "`", "")
	// A link in a heading anchors by its text.
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors: the anchors a page's headings make, with -1, -2 for repeats.
func anchors(page string) map[string]bool {
	lines, _ := prose(page)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range lines {
		if !strings.HasPrefix(l.text, "#") {
			continue
		}
		h := strings.TrimLeft(l.text, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(h)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var (
	codeSpan = regexp.MustCompile("`[^`]*`")
	mdLink   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

// TestRelativeLinks: every relative link of the pages names a file or
// directory of the repository, and every #anchor a heading of its page.
func TestRelativeLinks(t *testing.T) {
	for _, f := range markdownFiles(t) {
		page := readRoot(t, f)
		lines, _ := prose(page)
		for _, l := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.text, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				resolved := f
				if file != "" {
					resolved = filepath.ToSlash(filepath.Join(filepath.Dir(f), file))
					if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
						t.Errorf("%s:%d: the link %s names no file (%s)", f, l.n, target, resolved)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(resolved, ".md") {
					t.Errorf("%s:%d: the link %s has an anchor into a file that is not Markdown", f, l.n, target)
					continue
				}
				if !anchors(readRoot(t, resolved))[anchor] {
					t.Errorf("%s:%d: the link %s: %s has no heading whose anchor is #%s", f, l.n, target, resolved, anchor)
				}
			}
		}
	}
}

// The checks must see what they check: a page whose tables or links broke
// in a way a reader would not notice is caught.
func TestChecksCatch(t *testing.T) {
	page := "| a | b |\n|---|---|\n| `x` | y |\n| `broker/sqs` | none | `aws` | leaked |\n"
	lines, _ := prose(page)
	tbs := tables(lines)
	if len(tbs) != 1 || len(tbs[0].rows) != 2 {
		t.Fatalf("tables: %+v", tbs)
	}
	if n := len(cells(tbs[0].rows[1].text)); n != 4 {
		t.Errorf("the pasted row has %d cells, want 4", n)
	}
	if n := len(cells("| `a \\| b` | c |")); n != 2 {
		t.Errorf("an escaped pipe splits a cell: %d cells", n)
	}
	if got := anchors("# idem\n## The `idem` command\n## Measured\n## Measured\n"); !got["the-idem-command"] || !got["measured-1"] {
		t.Errorf("anchors: %v", got)
	}
	if !bytes.Contains([]byte(slug("Dead letters and traps: `idem dlq`, `idem doctor`")), []byte("dead-letters-and-traps-idem-dlq-idem-doctor")) {
		t.Errorf("slug: %s", slug("Dead letters and traps: `idem dlq`, `idem doctor`"))
	}
}
