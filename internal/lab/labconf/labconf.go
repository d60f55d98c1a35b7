// Package labconf is the one way the labs (test/), the demo network
// (internal/lab/demonet) and the experiments (eval/) write the Caddyfiles and
// Corefiles of the bin/caddy and bin/coredns processes they start, and
// find those binaries.
//
// Both files share one syntax: a directive is a line of words, optionally
// followed by a block of further directives in braces. [Directive] is that
// tree; [D] builds one. On top of it sit small typed builders for what
// Coral's servers read: [Node] (the DSHT node settings the Caddy app and
// the CoreDNS plugin share), [Caddy] (a Caddyfile's global options, the
// coral app and its sites), [Proxy] (coral_proxy) and [CoralPlugin] (the
// coral plugin in a Corefile).
//
//	text := labconf.Caddy{
//		Admin:    netip.MustParseAddrPort("127.0.70.1:2019"),
//		HTTPSOff: true,
//		Coral:    labconf.Node{Listen: netip.MustParseAddrPort("127.0.70.1:4000")},
//		Sites: []labconf.Directive{labconf.D(":8090").With(
//			labconf.D("bind", "127.0.70.1"),
//			labconf.Proxy{Zone: "nyud.test", CacheDir: dir}.Directive())},
//	}.String()
package labconf

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Directive is one line of a Caddyfile or Corefile — a name and its
// arguments — and the block under it, if any.
type Directive struct {
	// Comment is written above the directive, each line as "# line".
	Comment string
	// Name is the first word: a directive, a global option, or a site or
	// server block's address. Empty with a Block: the Caddyfile's global
	// options block.
	Name string
	Args []string
	// Block, when not nil, is written in braces after the arguments.
	Block []Directive
}

// D builds a directive. Each argument is formatted with fmt.Sprint; a
// []string adds its elements and empty strings are left out, so optional
// arguments can be passed as they are.
func D(name string, args ...any) Directive {
	d := Directive{Name: name}
	for _, a := range args {
		switch v := a.(type) {
		case []string:
			d.Args = append(d.Args, slices.DeleteFunc(slices.Clone(v), func(s string) bool { return s == "" })...)
		case string:
			if v != "" {
				d.Args = append(d.Args, v)
			}
		default:
			d.Args = append(d.Args, fmt.Sprint(v))
		}
	}
	return d
}

// With returns d with a block of the given directives (an empty block if
// there are none).
func (d Directive) With(block ...Directive) Directive {
	d.Block = append([]Directive{}, block...)
	return d
}

// Commented returns d with a comment above it.
func (d Directive) Commented(comment string) Directive {
	d.Comment = comment
	return d
}

// If returns d when cond holds, and otherwise the zero Directive, which is
// not written.
func If(cond bool, d Directive) Directive {
	if cond {
		return d
	}
	return Directive{}
}

func (d Directive) empty() bool { return d.Name == "" && d.Block == nil && d.Comment == "" }

// write appends d at the given depth.
func (d Directive) write(b *strings.Builder, indent string, depth int) {
	if d.empty() {
		return
	}
	pre := strings.Repeat(indent, depth)
	if d.Comment != "" {
		for _, l := range strings.Split(d.Comment, "\n") {
			b.WriteString(strings.TrimRight(pre+"# "+l, " ") + "\n")
		}
	}
	line := strings.Join(append([]string{d.Name}, d.Args...), " ")
	if d.Block != nil {
		line = strings.TrimLeft(line+" {", " ")
	}
	if line == "" {
		return
	}
	b.WriteString(pre + line + "\n")
	if d.Block != nil {
		for _, c := range d.Block {
			c.write(b, indent, depth+1)
		}
		b.WriteString(pre + "}\n")
	}
}

// render writes a whole file: the header comment, then the top-level
// blocks with a blank line between them.
func render(indent, comment string, top []Directive) string {
	var b strings.Builder
	if comment != "" {
		Directive{Comment: comment}.write(&b, indent, 0)
	}
	first := true
	for _, d := range top {
		if d.empty() {
			continue
		}
		if !first {
			b.WriteString("\n")
		}
		first = false
		d.write(&b, indent, 0)
	}
	return b.String()
}

// Caddyfile writes a Caddyfile (tab-indented): a header comment and the
// top-level blocks (the global options block, then the sites).
func Caddyfile(comment string, top ...Directive) string { return render("\t", comment, top) }

// Corefile writes a Corefile (indented by four spaces, as CoreDNS's own
// examples are): a header comment and the server blocks.
func Corefile(comment string, servers ...Directive) string { return render("    ", comment, servers) }

// WriteFile writes a configuration file.
func WriteFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }

// Node is a DSHT node's settings, written the same way in the Caddyfile's
// coral global option and in the Corefile's coral plugin.
type Node struct {
	Listen    netip.AddrPort   // listen
	Bootstrap []netip.AddrPort // bootstrap (none: the node starts a network)
	KeyFile   string           // key_file, if set: the primary key
	// AcceptedKeys are further key files the node accepts (a rotation):
	// with them the line is `key KeyFile AcceptedKeys...`.
	AcceptedKeys []string
	Levels       string         // levels, the RTT thresholds ("60ms 20ms"), if set
	Clusters     map[int]string // cluster LEVEL NAME: pinned clusters
}

// Directives are the node's lines, in a fixed order: listen, bootstrap,
// key_file (or key), levels, then the pinned clusters by level.
func (n Node) Directives() []Directive {
	var out []Directive
	if n.Listen.IsValid() {
		out = append(out, D("listen", n.Listen))
	}
	if len(n.Bootstrap) > 0 {
		var boot []string
		for _, b := range n.Bootstrap {
			boot = append(boot, b.String())
		}
		out = append(out, D("bootstrap", boot))
	}
	switch {
	case len(n.AcceptedKeys) > 0:
		out = append(out, D("key", append([]string{n.KeyFile}, n.AcceptedKeys...)))
	case n.KeyFile != "":
		out = append(out, D("key_file", n.KeyFile))
	}
	if n.Levels != "" {
		out = append(out, D("levels", strings.Fields(n.Levels)))
	}
	levels := make([]int, 0, len(n.Clusters))
	for l := range n.Clusters {
		levels = append(levels, l)
	}
	slices.Sort(levels)
	for _, l := range levels {
		out = append(out, D("cluster", l, n.Clusters[l]))
	}
	return out
}

// Caddy is a lab's Caddyfile: global options, the coral app (the DSHT node
// that module/caddy's coral_proxy uses) and the sites. persist_config is
// always off: a lab's configuration lives in its file.
type Caddy struct {
	// Comment is the file's header.
	Comment string
	// Admin is the admin API's address; the zero value turns it off.
	Admin netip.AddrPort
	// AdminOrigins are the Host values the admin API accepts, if set.
	AdminOrigins []string
	// HTTPSOff sets auto_https off; SkipTrust sets skip_install_trust.
	HTTPSOff, SkipTrust bool
	// Grace is grace_period, if set.
	Grace string
	// Options are further global options (default_bind, http_port, log).
	Options []Directive
	// Coral is the coral app's DSHT node; without Listen there is no
	// coral app (a Caddy that is not a Coral node).
	Coral Node
	// Sites are the site blocks.
	Sites []Directive
}

// String is the Caddyfile.
func (c Caddy) String() string {
	admin := D("admin", "off")
	if c.Admin.IsValid() {
		admin = D("admin", c.Admin)
		if len(c.AdminOrigins) > 0 {
			admin = admin.With(D("origins", c.AdminOrigins))
		}
	}
	global := []Directive{admin,
		If(c.HTTPSOff, D("auto_https", "off")),
		If(c.SkipTrust, D("skip_install_trust")),
		D("persist_config", "off"),
		If(c.Grace != "", D("grace_period", c.Grace)),
	}
	global = append(global, c.Options...)
	global = append(global, If(c.Coral.Listen.IsValid(), D("coral").With(c.Coral.Directives()...)))
	return Caddyfile(c.Comment, append([]Directive{D("").With(global...)}, c.Sites...)...)
}

// Proxy is a coral_proxy directive (module/caddy): the cooperative cache
// for one alias zone.
type Proxy struct {
	Zone         string   // the alias zone, e.g. nyud.test
	CacheDir     string   // cache_dir
	CacheSize    string   // cache_size, if set
	AllowOrigins []string // allow_origins, if any
	AllowPeers   []string // allow_peers, if any
	PeerAddress  string   // peer_address, if set
	RateLimit    string   // rate_limit ("off", "100 200"), if set
	// Extra are further lines (min_ttl 0, origin_timeout 5s, ...).
	Extra []Directive
}

// Directive is the coral_proxy directive with its block.
func (p Proxy) Directive() Directive {
	block := []Directive{
		D("cache_dir", p.CacheDir),
		If(p.CacheSize != "", D("cache_size", p.CacheSize)),
		If(len(p.AllowOrigins) > 0, D("allow_origins", p.AllowOrigins)),
		If(len(p.AllowPeers) > 0, D("allow_peers", p.AllowPeers)),
		If(p.PeerAddress != "", D("peer_address", p.PeerAddress)),
		If(p.RateLimit != "", D("rate_limit", strings.Fields(p.RateLimit))),
	}
	return D("coral_proxy", p.Zone).With(append(block, p.Extra...)...)
}

// CoralPlugin is the coral directive of a Corefile (plugin/coredns).
type CoralPlugin struct {
	Zone       string   // the Coral zone, e.g. nyucd.test
	Alias      string   // alias, if set: the zone users type
	Node       Node     // the DSHT node
	Probe      string   // probe MODE, if set
	ProbeCache string   // probe_cache, if set
	Classify   []string // classify PREFIX LEVEL lines ("127.0.0.0/8 0")
	AnswerTTL  int      // answer_ttl, if not 0
	LiveWithin string   // live_within, if set
	CheckEvery string   // check_interval, if set
	// Extra are further lines.
	Extra []Directive
}

// Directive is the coral directive with its block.
func (c CoralPlugin) Directive() Directive {
	block := []Directive{If(c.Alias != "", D("alias", c.Alias))}
	block = append(block, c.Node.Directives()...)
	block = append(block,
		If(c.Probe != "", D("probe", c.Probe)),
		If(c.ProbeCache != "", D("probe_cache", c.ProbeCache)))
	for _, cl := range c.Classify {
		block = append(block, D("classify", strings.Fields(cl)))
	}
	block = append(block,
		If(c.AnswerTTL != 0, D("answer_ttl", c.AnswerTTL)),
		If(c.LiveWithin != "", D("live_within", c.LiveWithin)),
		If(c.CheckEvery != "", D("check_interval", c.CheckEvery)))
	return D("coral", c.Zone).With(append(block, c.Extra...)...)
}
