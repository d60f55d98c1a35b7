package host

import (
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Both servers read their node's options from a Caddyfile-style block
// (CoreDNS's Corefile and Caddy's Caddyfile share Caddy's lexer): here,
// once, so that the grammar, the checks and the messages are the same in
// both.
//
//	listen     IP:PORT          required
//	advertise  IP:PORT
//	bootstrap  IP:PORT...       may repeat
//	key        PRIMARY_FILE [ACCEPTED_FILE...]   (key_file PATH: one file)
//	levels     DURATION...      1..7 decreasing RTT thresholds (levels 1..n)
//	cluster    LEVEL NAME       pins LEVEL (1..n) to the cluster NAME
//	identity   CERT_FILE KEY_FILE            node identity mode: this node's certificate and key
//	fleet      FILE             the fleet's public keys (with identity)
//	revocations FILE [POLL]     the revocation list, read every POLL (default 30s)
//	identity_optional           accept datagrams without an identity (migration)
//	legacy_peers                answer nodes of releases before address cookies (rolling upgrade)

// Dispenser is what the option parser needs of a server's configuration
// dispenser, positioned on a property line of a block: its name (Val), its
// arguments (RemainingArgs), the next line (NextBlock), and errors that say
// where they are (Errf). CoreDNS's *caddy.Controller is one as it is;
// Caddy's *caddyfile.Dispenser needs its NextBlock(0).
type Dispenser interface {
	Val() string
	RemainingArgs() []string
	NextBlock() bool
	Errf(format string, args ...any) error
}

// OptionsParser collects a node's options from the property lines of a
// block. CoreDNS's block mixes them with the DNS server's own properties,
// so the parser takes one line at a time; Caddy's global coral option holds
// nothing else (ParseOptions).
type OptionsParser struct {
	opts Options
}

// ParseOptions reads a block whose every line is a node option, from the
// dispenser positioned before its first line, and checks the result.
func ParseOptions(d Dispenser) (Options, error) {
	var p OptionsParser
	for d.NextBlock() {
		known, err := p.Property(d)
		if err != nil {
			return Options{}, err
		}
		if !known {
			return Options{}, d.Errf("unknown coral option %q", d.Val())
		}
	}
	return p.Finish(d)
}

// Property reads the line the dispenser is on if it is a node option,
// consuming its arguments, and reports whether it was one. Other lines are
// left unread.
func (p *OptionsParser) Property(d Dispenser) (bool, error) {
	prop := d.Val()
	switch prop {
	case "listen", "advertise", "bootstrap", "key", "key_file", "levels", "cluster",
		"identity", "fleet", "revocations", "identity_optional", "legacy_peers":
	default:
		return false, nil
	}
	args := d.RemainingArgs()
	o := &p.opts
	switch prop {
	case "listen":
		if err := argCount(d, prop, args, 1); err != nil {
			return true, err
		}
		ap, err := netip.ParseAddrPort(args[0])
		if err != nil {
			return true, d.Errf("listen %q: want IP:PORT (%v)", args[0], err)
		}
		o.Listen = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case "advertise":
		if err := argCount(d, prop, args, 1); err != nil {
			return true, err
		}
		ap, err := specificAddrPort(d, prop, args[0])
		o.Advertise = ap
		return true, err
	case "bootstrap":
		return true, p.bootstrap(d, args)
	case "key", "key_file":
		// key_file is the older spelling of key with one file.
		switch {
		case o.KeyFile != "":
			return true, d.Errf("%s: the network keys are given once (key PRIMARY_FILE [ACCEPTED_FILE...])", prop)
		case len(args) == 0 || (prop == "key_file" && len(args) != 1):
			return true, d.Errf("%s takes a key file (key PRIMARY_FILE [ACCEPTED_FILE...])", prop)
		}
		o.KeyFile = args[0]
		if len(args) > 1 {
			o.AcceptedKeyFiles = slices.Clone(args[1:])
		}
	case "levels":
		return true, p.levels(d, args)
	case "cluster":
		return true, p.cluster(d, args)
	case "identity", "fleet", "revocations", "identity_optional":
		return true, p.identity(d, prop, args)
	case "legacy_peers":
		o.LegacyPeers = true
		return true, argCount(d, prop, args, 0)
	}
	return true, nil
}

// identity reads the lines of node identity mode.
func (p *OptionsParser) identity(d Dispenser, prop string, args []string) error {
	if p.opts.Identity == nil {
		p.opts.Identity = &IdentityFiles{}
	}
	f := p.opts.Identity
	switch prop {
	case "identity":
		if len(args) != 2 {
			return d.Errf("identity takes the node's certificate file and its key file (identity CERT_FILE KEY_FILE), got %d arguments", len(args))
		}
		f.Certificate, f.Key = args[0], args[1]
	case "fleet":
		if err := argCount(d, prop, args, 1); err != nil {
			return err
		}
		f.Fleet = args[0]
	case "revocations":
		if len(args) < 1 || len(args) > 2 {
			return d.Errf("revocations takes a file and an optional poll interval (revocations FILE [POLL]), got %d arguments", len(args))
		}
		f.Revocations = args[0]
		if len(args) == 2 {
			poll, err := time.ParseDuration(args[1])
			if err != nil || poll < time.Second {
				return d.Errf("revocations poll %q: want a duration of at least 1s, such as 30s", args[1])
			}
			f.RevocationPoll = poll
		}
	case "identity_optional":
		if err := argCount(d, prop, args, 0); err != nil {
			return err
		}
		f.Optional = true
	}
	return nil
}

func (p *OptionsParser) bootstrap(d Dispenser, args []string) error {
	if len(args) == 0 {
		return d.Errf("bootstrap needs at least one IP:PORT")
	}
	for _, a := range args {
		ap, err := specificAddrPort(d, "bootstrap", a)
		if err != nil {
			return err
		}
		p.opts.Bootstrap = append(p.opts.Bootstrap, ap)
	}
	return nil
}

func (p *OptionsParser) levels(d Dispenser, args []string) error {
	if len(args) == 0 || len(args) > coraldht.MaxLevels-1 {
		return d.Errf("levels takes 1..%d RTT thresholds (levels 1..n), got %d", coraldht.MaxLevels-1, len(args))
	}
	levels := make([]time.Duration, 0, len(args))
	for i, a := range args {
		th, err := time.ParseDuration(a)
		if err != nil || th <= 0 {
			return d.Errf("levels %q: want a positive duration such as 20ms or 1h", a)
		}
		if i > 0 && th >= levels[i-1] {
			return d.Errf("levels must decrease: level %d's threshold %v is not below level %d's %v", i+1, th, i, levels[i-1])
		}
		levels = append(levels, th)
	}
	p.opts.Levels = levels
	return nil
}

func (p *OptionsParser) cluster(d Dispenser, args []string) error {
	if err := argCount(d, "cluster", args, 2); err != nil {
		return err
	}
	lvl, err := strconv.Atoi(args[0])
	if err != nil || lvl < 1 {
		return d.Errf("cluster %q: the level must be a number 1..n (level 0 is the global cluster)", args[0])
	}
	if _, dup := p.opts.Pins[lvl]; dup {
		return d.Errf("cluster for level %d given twice", lvl)
	}
	if p.opts.Pins == nil {
		p.opts.Pins = map[int]string{}
	}
	p.opts.Pins[lvl] = args[1]
	return nil
}

// Finish checks what only the whole block tells (listen given, pins within
// the levels) and then Options.Validate, and returns the options. d places
// the errors (at the end of the block).
func (p *OptionsParser) Finish(d Dispenser) (Options, error) {
	o := p.opts
	if !o.Listen.IsValid() {
		return Options{}, d.Errf("listen IP:PORT is required: the UDP address of this server's Coral DSHT node")
	}
	n := len(o.Levels)
	if n == 0 {
		n = len(coraldht.DefaultConfig().Levels)
	}
	for lvl := range o.Pins {
		if lvl > n {
			return Options{}, d.Errf("cluster level %d: this configuration has levels 1..%d", lvl, n)
		}
	}
	if err := o.Validate(); err != nil {
		return Options{}, d.Errf("%s", err.Error())
	}
	return o, nil
}

// argCount checks that prop has n arguments.
func argCount(d Dispenser, prop string, args []string, n int) error {
	if len(args) != n {
		return d.Errf("%s takes %d argument(s), got %d", prop, n, len(args))
	}
	return nil
}

// specificAddrPort parses an address peers can send to: not 0.0.0.0 or ::,
// not port 0.
func specificAddrPort(d Dispenser, prop, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
		return netip.AddrPort{}, d.Errf("%s %q: want a specific IP:PORT", prop, s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
