package coral

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
)

// shippedCorefiles are the Corefiles this repository ships or tells a
// reader to write: the example files, and every Corefile block of the
// plugin's README and of the operations guide, by where they come from.
func shippedCorefiles(t *testing.T) map[string]string {
	t.Helper()
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	out := map[string]string{
		"Corefile.example":         read("Corefile.example"),
		"deploy/examples/Corefile": read("deploy/examples/Corefile"),
	}
	blocks := func(rel string, fence *regexp.Regexp) {
		for i, m := range fence.FindAllStringSubmatch(read(rel), -1) {
			if strings.Contains(m[1], "coral ") {
				out[rel+"#"+string(rune('1'+i))] = m[1]
			}
		}
	}
	blocks("plugin/coredns/README.md", regexp.MustCompile("(?s)~~~ corefile\n(.*?)~~~"))
	blocks("docs/operations.md", regexp.MustCompile("(?s)```\n(nyucd[^`]*?)```"))
	return out
}

// TestShippedCorefiles: every shipped Corefile, as written, passes the
// configuration check (coral-check: the Corefile's syntax and directives,
// every coral block as the plugin reads it; a key file the example names
// is replaced by a real one), and every ready plugin in one says `monitor
// continuously` (issue 36, finding 4: with CoreDNS's default, /ready stays
// 200 while the node drains).
func TestShippedCorefiles(t *testing.T) {
	key := filepath.Join(t.TempDir(), "network.key")
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	files := shippedCorefiles(t)
	if len(files) < 5 {
		t.Fatalf("found %d Corefiles, want the two files and the README's and the guide's blocks", len(files))
	}
	for name, text := range files {
		t.Run(name, func(t *testing.T) {
			text = strings.ReplaceAll(text, "/etc/coral/network.key", key)
			if n, err := CheckCorefile(name, strings.NewReader(text)); err != nil || n != 1 {
				t.Errorf("%d coral blocks, %v", n, err)
			}
			valid := append(slices.Clone(dnsserver.Directives), "coral")
			blocks, err := caddyfile.Parse(name, strings.NewReader(text), valid)
			if err != nil {
				t.Fatal(err)
			}
			for _, sb := range blocks {
				toks, ok := sb.Tokens["ready"]
				if !ok {
					continue
				}
				var words []string
				for _, tk := range toks {
					words = append(words, tk.Text)
				}
				if !strings.Contains(strings.Join(words, " "), "monitor continuously") {
					t.Errorf("server block %v: ready without `monitor continuously`: %v", sb.Keys, words)
				}
			}
		})
	}
}
