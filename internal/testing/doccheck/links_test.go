package doccheck

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module's root: three directories above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

// markdownFiles lists the repository's Markdown files, leaving out local
// state (.data, bin) and version control.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".data", "bin", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fenceRe   = regexp.MustCompile("^\\s*(```|~~~)")
	codeRe    = regexp.MustCompile("`[^`]*`")
	linkRe    = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlIDRe  = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	inlineRe  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// document is a Markdown file's text outside code blocks, split in lines.
type document struct {
	lines   []string // prose lines, code blocks blanked
	anchors map[string]bool
}

func parse(text string) document {
	var d document
	d.anchors = map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRe.MatchString(line) {
			inFence = !inFence
			d.lines = append(d.lines, "")
			continue
		}
		if inFence {
			d.lines = append(d.lines, "")
			continue
		}
		d.lines = append(d.lines, line)
		if m := headingRe.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if n, ok := seen[s]; ok {
				seen[s] = n + 1
				s = fmt.Sprintf("%s-%d", s, n+1)
			} else {
				seen[s] = 0
			}
			d.anchors[s] = true
		}
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
	}
	return d
}

// slug is GitHub's anchor for a heading: its text without markup, lower
// case, with every character other than a letter, a digit, '-' or '_'
// dropped and spaces turned into '-'.
func slug(heading string) string {
	heading = inlineRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRelativeLinksResolve fails on a relative link in a Markdown file
// whose file does not exist, or whose #anchor names no heading of that file
// (or of the same file, for a bare #anchor).
func TestRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	docs := map[string]document{}
	load := func(path string) (document, error) {
		if d, ok := docs[path]; ok {
			return d, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return document{}, err
		}
		d := parse(string(b))
		docs[path] = d
		return d, nil
	}
	checked := 0
	for _, file := range files {
		d, err := load(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		// Links may span lines: join each paragraph's lines.
		text := strings.Join(d.lines, "\n")
		text = codeRe.ReplaceAllStringFunc(text, func(s string) string {
			return strings.Repeat(" ", len(s))
		})
		for _, m := range linkRe.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[4]:m[5]]
			line := 1 + strings.Count(text[:m[0]], "\n")
			where := fmt.Sprintf("%s:%d: link %q", rel, line, target)
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			u, err := url.Parse(target)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			dest := file
			if u.Path != "" {
				if strings.HasPrefix(u.Path, "/") {
					t.Errorf("%s: an absolute path does not resolve on GitHub and in a checkout alike; use a relative one", where)
					continue
				}
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(u.Path))
				if !strings.HasPrefix(dest, root+string(filepath.Separator)) && dest != root {
					t.Errorf("%s: points outside the repository", where)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: %s does not exist", where, u.Path)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: an anchor into a file that is not Markdown cannot be checked", where)
				continue
			}
			dd, err := load(dest)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !dd.anchors[u.Fragment] {
				t.Errorf("%s: no heading of %s has the anchor #%s", where, filepath.Base(dest), u.Fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link pattern no longer matches the documents")
	}
}

// TestLinkCheckCatchesBrokenLinks runs the parser on a document with known
// good and bad links, so that the check above cannot pass by finding nothing.
func TestLinkCheckCatchesBrokenLinks(t *testing.T) {
	t.Parallel()
	d := parse("# Top\n\n## Group commit\n\n## Slack (Events API)\n\n## `make run`\n\n## Top\n\n```\n# not a heading\n```\n")
	for _, want := range []string{"top", "group-commit", "slack-events-api", "make-run", "top-1"} {
		if !d.anchors[want] {
			t.Errorf("anchor %q missing; have %v", want, d.anchors)
		}
	}
	if d.anchors["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
	text := "see [a](x.md#y) and ![img](docs/p.png \"title\") and [multi\nline](#z) but not `[code](q.md)`"
	text = codeRe.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat(" ", len(s)) })
	var got []string
	for _, m := range linkRe.FindAllStringSubmatch(text, -1) {
		got = append(got, m[2])
	}
	if want := "x.md#y docs/p.png #z"; strings.Join(got, " ") != want {
		t.Errorf("links found: %q, want %q", strings.Join(got, " "), want)
	}
}
