package archtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A pattern names packages by their path inside the module: "a/b" is that
// package, "a/b/..." it and every package below it, "a/b/*" only the
// packages below it, "..." every package of the module.
type pattern = string

// A layer is a set of packages with one role. Packages of a layer that ships
// (is built into bin/coredns, bin/caddy or a packaged command) depend on no
// package of a layer that does not.
type layer struct {
	name     string
	ships    bool
	packages []pattern
}

var layers = []layer{
	{"name grammar", true, []pattern{"coralname"}},
	{"DSHT node", true, []pattern{"coraldht/..."}},
	{"DNS server", true, []pattern{"plugin/coredns/..."}},
	{"HTTP proxy", true, []pattern{"module/caddy/..."}},
	{"shared by both servers", true, []pattern{"internal/dhtmetrics", "internal/portguard"}},
	{"commands", true, []pattern{"cmd/coral-check", "cmd/coral-fleet", "cmd/dhtdemo"}},
	// cmd/coraldemo is `make demo`: a lab with a command line, not a
	// shipped program.
	{"labs", false, []pattern{"internal/lab/...", "cmd/coraldemo"}},
	{"experiments", false, []pattern{"eval/..."}},
	{"tests", false, []pattern{"test/...", "internal/archtest"}},
}

// A rule forbids the packages matching from to depend, directly or through
// other packages, on any package matching one of forbidden.
type rule struct {
	from      pattern
	forbidden []pattern
	why       string
}

var rules = []rule{
	{"coralname", []pattern{"..."},
		"the name grammar is the contract both servers share; it stands alone"},
	{"coraldht/...", []pattern{"plugin/...", "module/...", "cmd/...", "internal/..."},
		"the node knows nothing of the servers and tools built on it"},
	{"plugin/coredns/...", []pattern{"module/caddy/..."},
		"the DNS server and the proxy meet only in coraldht and coralname"},
	{"module/caddy/...", []pattern{"plugin/coredns/..."},
		"the DNS server and the proxy meet only in coraldht and coralname"},
	{"coraldht/internal/wire", []pattern{"coraldht", "coraldht/host", "coraldht/memnet", "coraldht/icmpprobe", "coraldht/acmetxt"},
		"the wire codec is the bottom of the node: the packages above use it, it uses none of them"},
	{"coraldht/memnet", []pattern{"coraldht", "coraldht/host", "coraldht/icmpprobe", "coraldht/acmetxt"},
		"the in-memory network stands below the node, so the node's own tests can run on it"},
	{"coraldht/icmpprobe", []pattern{"coraldht", "coraldht/host", "coraldht/memnet", "coraldht/internal/...", "coraldht/acmetxt"},
		"ICMP knows nothing of the DSHT; the node and the DNS plugin both use it"},
	{"coraldht/fleet", []pattern{"coraldht", "coraldht/host", "coraldht/memnet", "coraldht/internal/...", "coraldht/icmpprobe", "coraldht/acmetxt"},
		"certificates and revocation lists are files an operator's tool makes: they know nothing of the node"},
	{"module/caddy/*", []pattern{"module/caddy"},
		"the proxy's subpackages are parts it assembles, not users of it"},
}

// An externalRule forbids the packages matching from to depend, directly
// or through other packages, on any package outside the module whose
// import path starts with one of prefixes.
type externalRule struct {
	from     pattern
	prefixes []string
	why      string
}

var externalRules = []externalRule{
	{"module/caddy/*", []string{"github.com/caddyserver/"},
		"the proxy's core (module/caddy/proxy) and its parts are Caddy's neither: module/caddy adapts them to Caddy"},
}

const modulePath = "github.com/coralcdn/coral"

// pkg is what the test needs of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string // direct, without tests
	Deps       []string // transitive, without tests
}

// rel is p's path inside the module, and whether p is in the module at all.
func rel(p string) (string, bool) {
	if p == modulePath {
		return ".", true
	}
	r, ok := strings.CutPrefix(p, modulePath+"/")
	return r, ok
}

func matches(pat pattern, p string) bool {
	switch {
	case pat == "...":
		return true
	case strings.HasSuffix(pat, "/..."):
		base := strings.TrimSuffix(pat, "/...")
		return p == base || strings.HasPrefix(p, base+"/")
	case strings.HasSuffix(pat, "/*"):
		return strings.HasPrefix(p, strings.TrimSuffix(pat, "*"))
	default:
		return p == pat
	}
}

func matchesAny(pats []pattern, p string) bool {
	return slices.ContainsFunc(pats, func(pat pattern) bool { return matches(pat, p) })
}

// layersOf lists the layers whose patterns match p.
func layersOf(p string) []layer {
	var in []layer
	for _, l := range layers {
		if matchesAny(l.packages, p) {
			in = append(in, l)
		}
	}
	return in
}

// violations checks every package of pkgs against the layers and rules and
// describes each breach, with the chain of imports that makes it.
func violations(pkgs []pkg) []string {
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		in := layersOf(from)
		if len(in) != 1 {
			out = append(out, fmt.Sprintf("%s is in %d layers, want exactly 1: add it to the layers table", from, len(in)))
			continue
		}
		for _, d := range p.Deps {
			to, ok := rel(d)
			if !ok {
				for _, r := range externalRules {
					if matches(r.from, from) && slices.ContainsFunc(r.prefixes, func(pre string) bool { return strings.HasPrefix(d, pre) }) {
						out = append(out, fmt.Sprintf("%s depends on %s (%s): %s", from, d, r.why, chain(byPath, p.ImportPath, d)))
					}
				}
				continue
			}
			if dl := layersOf(to); in[0].ships && len(dl) == 1 && !dl[0].ships {
				out = append(out, fmt.Sprintf("%s (%s, ships) depends on %s (%s, does not ship): %s",
					from, in[0].name, to, dl[0].name, chain(byPath, p.ImportPath, d)))
			}
			for _, r := range rules {
				if matches(r.from, from) && matchesAny(r.forbidden, to) {
					out = append(out, fmt.Sprintf("%s depends on %s (%s): %s", from, to, r.why, chain(byPath, p.ImportPath, d)))
				}
			}
		}
	}
	return out
}

// chain is a shortest import path from one package to another, for the
// message: "a → b → c" (a package outside the module by its import path).
func chain(byPath map[string]pkg, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				r, ok := rel(p)
				if !ok {
					r = p
				}
				path = append(path, r)
			}
			slices.Reverse(path)
			return strings.Join(path, " → ")
		}
		for _, next := range byPath[cur].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return "(no chain found)"
}

// listModule runs `go list -deps -json ./...` at the module's root.
func listModule(t *testing.T) []pkg {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestLayering(t *testing.T) {
	pkgs := listModule(t)
	ours := 0
	for _, p := range pkgs {
		if _, ok := rel(p.ImportPath); ok {
			ours++
		}
	}
	if ours < 30 {
		t.Fatalf("go list found %d packages of the module; the listing is broken", ours)
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestRulesCatchBreaches feeds the checker a made-up module with one breach
// of each kind, so a checker that reports nothing cannot pass.
func TestRulesCatchBreaches(t *testing.T) {
	m := func(p string) string { return modulePath + "/" + p }
	mk := func(p string, imports ...string) pkg {
		q := pkg{ImportPath: m(p)}
		for _, i := range imports {
			q.Imports = append(q.Imports, m(i))
		}
		return q
	}
	pkgs := []pkg{
		mk("coralname", "coraldht"),
		mk("coraldht", "coraldht/host"),
		mk("coraldht/host", "module/caddy"),
		mk("module/caddy", "module/caddy/diskcache", "internal/lab/proc"),
		mk("module/caddy/diskcache"),
		mk("module/caddy/purge", "module/caddy"),
		mk("module/caddy/proxy", "module/caddy/abuse"),
		mk("module/caddy/abuse"),
		mk("plugin/coredns", "module/caddy/diskcache"),
		mk("internal/lab/proc"),
		mk("internal/newthing"),
	}
	// Deps is the transitive closure of Imports, as go list reports it.
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	for i := range pkgs {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(p string) {
			for _, d := range byPath[p].Imports {
				if !seen[d] {
					seen[d] = true
					walk(d)
				}
			}
		}
		walk(pkgs[i].ImportPath)
		for d := range seen {
			pkgs[i].Deps = append(pkgs[i].Deps, d)
		}
		slices.Sort(pkgs[i].Deps)
	}
	// A part of the proxy that imports Caddy, and the core through it.
	const caddyPkg = "github.com/caddyserver/caddy/v2"
	for i := range pkgs {
		switch pkgs[i].ImportPath {
		case m("module/caddy/abuse"):
			pkgs[i].Imports = append(pkgs[i].Imports, caddyPkg)
			pkgs[i].Deps = append(pkgs[i].Deps, caddyPkg)
		case m("module/caddy/proxy"):
			pkgs[i].Deps = append(pkgs[i].Deps, caddyPkg)
		}
	}
	pkgs = append(pkgs, pkg{ImportPath: caddyPkg})

	got := strings.Join(violations(pkgs), "\n")
	for _, want := range []string{
		"coralname depends on coraldht (the name grammar",
		"coraldht depends on module/caddy (the node knows nothing",
		"coraldht → coraldht/host → module/caddy",
		"module/caddy (HTTP proxy, ships) depends on internal/lab/proc (labs, does not ship)",
		"coralname (name grammar, ships) depends on internal/lab/proc",
		"module/caddy/purge depends on module/caddy (the proxy's subpackages",
		"plugin/coredns depends on module/caddy/diskcache (the DNS server and the proxy",
		"internal/newthing is in 0 layers",
		"module/caddy/proxy depends on github.com/caddyserver/caddy/v2 (the proxy's core",
		"module/caddy/proxy → module/caddy/abuse → github.com/caddyserver/caddy/v2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations lack %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "module/caddy/diskcache depends") || strings.Contains(got, "module/caddy depends on module/caddy") {
		t.Errorf("a package the rules allow is reported:\n%s", got)
	}
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		pat, p string
		want   bool
	}{
		{"coralname", "coralname", true},
		{"coralname", "coralname/x", false},
		{"coraldht/...", "coraldht", true},
		{"coraldht/...", "coraldht/host", true},
		{"coraldht/...", "coraldhtx", false},
		{"module/caddy/*", "module/caddy", false},
		{"module/caddy/*", "module/caddy/diskcache", true},
		{"module/caddy/*", "module/caddyx", false},
		{"...", "anything/at/all", true},
	} {
		if got := matches(c.pat, c.p); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.pat, c.p, got, c.want)
		}
	}
}
