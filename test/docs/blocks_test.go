package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Documents whose blocks are not checked, and why. Every other Markdown
// file of the repository is: a new README is covered the day it is
// written.
var unchecked = map[string]string{
	"CHANGELOG.md":         "the change log: no commands or configurations",
	"docs/evaluation.md":   "the experiments' commands, minutes each: each experiment has its own test (eval/NAME) and its results in docs/eval/",
	"coraldht/PROTOCOL.md": "the wire format: diagrams, no commands or configurations",
}

// A block is one fenced block of a document, with the marker on the line
// before its fence.
type block struct {
	file   string // relative to the repository
	line   int    // of its opening fence
	lang   string // the fence's info string
	marker string // what follows "check:" (or "walkthrough NAME")
	text   string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var (
	fenceRE       = regexp.MustCompile("^([ \t]*)(```+|~~~+)[ \t]*([^ \t`]*)")
	markerRE      = regexp.MustCompile(`^[ \t]*<!-- check: (.+?) -->[ \t]*$`)
	walkMarkerRE  = regexp.MustCompile(`^[ \t]*<!-- walkthrough: ([a-z-]+) -->[ \t]*$`)
	identMarkerRE = regexp.MustCompile(`^[ \t]*<!-- identity: ([a-z-]+) -->[ \t]*$`)
	blackMarkerRE = regexp.MustCompile(`^[ \t]*<!-- blacklist: ([a-z-]+) -->[ \t]*$`)
	reportRE      = regexp.MustCompile(`^[ \t]*<!-- report:[^>]* -->[ \t]*$`) // eval/report's region opening
	skipDirsWalks = []string{".git", "bin", "node_modules", "work"}
)

// docFiles lists the Markdown files of the repository, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains(skipDirsWalks, d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docBlocks reads the fenced blocks of every checked document.
func docBlocks(t *testing.T) []block {
	t.Helper()
	root := repoRoot(t)
	var blocks []block
	for _, rel := range docFiles(t, root) {
		if _, skip := unchecked[rel]; skip {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, parseBlocks(rel, data)...)
	}
	return blocks
}

// parseBlocks finds the fenced blocks of a Markdown document (``` or ~~~,
// indented as list items may be), with the marker right above each.
func parseBlocks(file string, data []byte) []block {
	var out []block
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var prev string
	var cur *block
	var fence, indent string
	var body []string
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != nil {
			if strings.TrimSpace(line) == fence || (strings.HasPrefix(strings.TrimSpace(line), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "") {
				cur.text = strings.Join(body, "\n") + "\n"
				out = append(out, *cur)
				cur, body = nil, nil
			} else {
				body = append(body, strings.TrimPrefix(line, indent))
			}
			prev = line
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			cur = &block{file: file, line: n, lang: m[3]}
			indent, fence = m[1], m[2]
			if mm := markerRE.FindStringSubmatch(prev); mm != nil {
				cur.marker = mm[1]
			} else if mm := walkMarkerRE.FindStringSubmatch(prev); mm != nil {
				cur.marker = "walkthrough " + mm[1]
			} else if mm := identMarkerRE.FindStringSubmatch(prev); mm != nil {
				cur.marker = "identity " + mm[1]
			} else if mm := blackMarkerRE.FindStringSubmatch(prev); mm != nil {
				cur.marker = "blacklist " + mm[1]
			}
		}
		if !reportRE.MatchString(line) {
			prev = line // a generated block's marker stands above its region's opening
		}
	}
	return out
}

// markerHelp says how to mark a block.
const markerHelp = `put one of these on the line right before the fence:
  <!-- check: caddyfile -->            a whole Caddyfile: adapts, is caddy fmt-clean, passes caddy validate (in the sandbox)
  <!-- check: caddyfile adapt -->      the same without validate (it names what the sandbox cannot have)
  <!-- check: corefile -->             a whole Corefile: coral-check passes (in the sandbox)
  <!-- check: prometheus-config -->    a Prometheus configuration: promtool check config passes
  <!-- check: run FIXTURE -->          shell commands, pasted one by one into FIXTURE (fixtures_test.go) and each must succeed
  <!-- check: same-as PATH -->         a file of the repository, shown as it is (less its # comment lines)
  <!-- check: none: REASON -->         not checked here, and why (output, a syntax summary, a test's own command, ...)`

// kinds are the markers' first words.
var kinds = []string{"caddyfile", "corefile", "prometheus-config", "run", "same-as", "none:", "walkthrough", "identity", "blacklist"}

// TestEveryBlockMarked: every fenced block of every checked document says
// how it is checked, so nothing a reader is told to paste goes untested
// unnoticed; and every marker is well formed.
func TestEveryBlockMarked(t *testing.T) {
	blocks := docBlocks(t)
	if len(blocks) < 20 {
		t.Fatalf("only %d blocks found: the scanner is broken", len(blocks))
	}
	bad := 0
	for _, b := range blocks {
		f := strings.Fields(b.marker)
		switch {
		case len(f) == 0:
			t.Errorf("%v: a %q block without a marker", b, b.lang)
			bad++
		case !slices.Contains(kinds, f[0]):
			t.Errorf("%v: unknown marker %q", b, b.marker)
			bad++
		case f[0] == "none:" && len(f) < 3:
			t.Errorf("%v: %q gives no reason", b, b.marker)
		case f[0] == "run" && (len(f) != 2 || fixtures[f[1]].start == nil):
			t.Errorf("%v: %q: want run FIXTURE, one of %s", b, b.marker, fixtureNames())
		case f[0] == "same-as" && len(f) != 2:
			t.Errorf("%v: %q: want same-as PATH", b, b.marker)
		case f[0] == "caddyfile" && len(f) > 1 && (len(f) != 2 || f[1] != "adapt"):
			t.Errorf("%v: %q: want caddyfile or caddyfile adapt", b, b.marker)
		}
	}
	if bad > 0 {
		t.Log(markerHelp)
	}
	// The scanner itself: a block without a marker is found as one.
	got := parseBlocks("x.md", []byte("text\n\n```sh\nls\n```\n<!-- check: run tmp -->\n  ~~~ corefile\n  . {\n  }\n  ~~~\n"+
		"<!-- check: none: a test's command -->\n<!-- report:command x.json -->\n```\ngo test\n```\n<!-- /report -->\n"))
	if len(got) != 3 || got[0].marker != "" || got[1].marker != "run tmp" || got[1].text != ". {\n}\n" || got[1].lang != "corefile" || got[2].marker != "none: a test's command" {
		t.Errorf("parseBlocks = %+v", got)
	}
}

// TestDocBlocks checks every marked block as its marker says.
func TestDocBlocks(t *testing.T) {
	root := repoRoot(t)
	for _, b := range docBlocks(t) {
		f := strings.Fields(b.marker)
		if len(f) == 0 || f[0] == "none:" || f[0] == "walkthrough" || f[0] == "identity" || f[0] == "blacklist" {
			continue // TestEveryBlockMarked; test/deploy's TestWalkthrough; test/identitylab; test/proxylab's TestFleetBlacklist
		}
		t.Run(strings.NewReplacer("/", "_", ":", "_").Replace(b.String()), func(t *testing.T) {
			switch f[0] {
			case "caddyfile":
				checkCaddyfile(t, b.String(), b.text, len(f) == 1)
			case "corefile":
				checkCorefile(t, b.String(), b.text)
			case "prometheus-config":
				checkPrometheusConfig(t, b.text)
			case "same-as":
				checkSameAs(t, root, f[1], b.text)
			case "run":
				term := fixtures[f[1]].start(t)
				term.run(b.String(), b.text)
			}
		})
	}
}

// checkCaddyfile adapts a Caddyfile with bin/caddy, checks that caddy fmt
// leaves it as it is, and, when validate, runs caddy validate in the
// sandbox.
func checkCaddyfile(t *testing.T, what, text string, validate bool) {
	t.Helper()
	bin := binary(t, "caddy")
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput(); err != nil {
		t.Errorf("%s: caddy adapt: %v\n%s", what, err, out)
	}
	formatted, err := exec.Command(bin, "fmt", path).Output()
	if err != nil {
		t.Fatalf("%s: caddy fmt: %v", what, err)
	}
	if string(formatted) != text {
		t.Errorf("%s is not caddy fmt-clean; caddy fmt makes it:\n%s", what, formatted)
	}
	if validate {
		s := newSandbox(t)
		term := s.terminal(t, dir)
		term.run(what, "caddy validate --config Caddyfile --adapter caddyfile\n")
	}
}

// checkCorefile runs coral-check on a Corefile in the sandbox.
func checkCorefile(t *testing.T, what, text string) {
	t.Helper()
	s := newSandbox(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	term := s.terminal(t, dir)
	term.run(what, "coral-check Corefile\n")
}

// checkPrometheusConfig runs promtool check config on it.
func checkPrometheusConfig(t *testing.T, text string) {
	t.Helper()
	promtool := needTool(t, "promtool", "Debian package prometheus: make deps")
	path := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// checkSameAs compares a block with a file of the repository less its
// comment lines (a configuration shown in a guide is the file installed).
func checkSameAs(t *testing.T, root, rel, text string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	want := strings.TrimLeft(strings.Join(lines, "\n"), "\n")
	if want != text {
		t.Errorf("the block is not %s as it is (less comments); want:\n%s", rel, want)
	}
}
