package host

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Options are a node's settings. The servers' configuration names for
// them are the same in both (listen, advertise, bootstrap, key_file,
// levels; pins are `cluster` lines in CoreDNS and `clusters` in Caddy's
// JSON), and Validate's messages use those names.
type Options struct {
	// Listen is the UDP address the node's socket binds, for example
	// 192.0.2.10:4000. It names the node across reloads: one node runs per
	// Listen address, and a reload that keeps the address keeps the
	// socket. Required.
	Listen netip.AddrPort

	// Advertise is the address other nodes use to reach this one; the
	// node's ID is SHA-1 of it, and its IP is the address DNS hands out
	// for the server. Zero: Listen, which must then be a specific address.
	Advertise netip.AddrPort

	// Bootstrap lists nodes (IP:port) to join the network through; the join
	// loop tries them until one answers. Empty: this node is the first of
	// its network.
	Bootstrap []netip.AddrPort

	// KeyFile is the network key shared by every node of the Coral network
	// (see coraldht.LoadKeyFile), the primary of the node's keyring: it
	// tags every datagram the node sends. Required unless the node listens
	// on and advertises a loopback address, where a public development key
	// is used.
	KeyFile string

	// AcceptedKeyFiles are further network keys the node accepts but does
	// not send with, during a key rotation (coraldht.Keyring): the files
	// after the first of the servers' `key` option. At most
	// coraldht.KeyringSize-1; they need KeyFile.
	//
	// The keys are not node settings: a reload that changes only the key
	// files or their contents updates the running node's keyring in place.
	AcceptedKeyFiles []string

	// Levels are the RTT thresholds of cluster levels 1..n, decreasing.
	// Empty: coraldht's default, 60ms and 20ms.
	Levels []time.Duration

	// Pins fixes the node's cluster at some levels (1..n) by name; see
	// coraldht.Config.Pins. Empty: no pins.
	Pins map[int]string

	// Services are what this server runs, advertised to peers:
	// coraldht.ServiceDNS for CoreDNS, coraldht.ServiceHTTP for Caddy.
	Services coraldht.Services

	// Logger receives the node's log and this package's (start, restarts,
	// bootstrap retries, joining). Nil: discarded. It is not a node
	// setting: a new logger alone does not restart the node.
	Logger *slog.Logger
}

// A FieldError is an Options field that does not validate.
type FieldError struct {
	Field string // the Options field: "Listen", "Bootstrap", "KeyFile", …
	Msg   string // what is wrong, naming the option as servers spell it
}

func (e *FieldError) Error() string { return e.Msg }

// keyRequired is Validate's message for a node off loopback without a
// network key.
const keyRequired = "key is required unless the node listens on loopback: the network key authenticates every DSHT datagram (" + coraldht.KeyHelp + ")"

// Validate checks the options without touching the network or the key
// file (Acquire reads that). The error is a *FieldError naming the field.
func (o Options) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if !o.Listen.IsValid() {
		return bad("Listen", "listen: want IP:PORT")
	}
	for _, b := range o.Bootstrap {
		if !b.IsValid() || b.Addr().IsUnspecified() || b.Port() == 0 {
			return bad("Bootstrap", "bootstrap %v: want a specific IP:PORT", b)
		}
	}
	if o.KeyFile == "" {
		if !o.Listen.Addr().IsLoopback() {
			return bad("KeyFile", "%s", keyRequired)
		}
		if o.Advertise.IsValid() && !o.Advertise.Addr().IsLoopback() {
			return bad("KeyFile", "key is required to advertise %v, an address off loopback (%s)", o.Advertise, coraldht.KeyHelp)
		}
	}
	if len(o.AcceptedKeyFiles) > 0 && o.KeyFile == "" {
		return bad("KeyFile", "accepted key files need a primary key file (key PRIMARY_FILE [ACCEPTED_FILE...])")
	}
	if n := 1 + len(o.AcceptedKeyFiles); n > coraldht.KeyringSize {
		return bad("AcceptedKeyFiles", "key: %d files; a node holds at most %d keys", n, coraldht.KeyringSize)
	}
	if !o.Advertise.IsValid() && o.Listen.Addr().IsUnspecified() {
		return bad("Advertise", "advertise is required when listen (%v) is not a specific address", o.Listen)
	}
	cfg := o.config()
	if err := cfg.Validate(); err != nil {
		var ce *coraldht.ConfigError
		if errors.As(err, &ce) {
			return bad(ce.Field, "%v", err)
		}
		return bad("", "%v", err)
	}
	return nil
}

// config is the node's coraldht configuration, without the key.
func (o Options) config() coraldht.Config {
	cfg := coraldht.DefaultConfig()
	cfg.Services = o.Services
	cfg.Advertise = o.Advertise
	if len(o.Levels) > 0 {
		cfg.Levels = slices.Clone(o.Levels)
	}
	if len(o.Pins) > 0 {
		cfg.Pins = maps.Clone(o.Pins)
	}
	cfg.Logger = o.Logger
	return cfg
}

// settings are what identifies a node's configuration: equal settings
// share a node, different ones restart it. The keys are not among them
// (plan.keysEqual): a new key set updates the running node.
type settings struct {
	advertise netip.AddrPort
	bootstrap []netip.AddrPort
	keyed     bool // has a key file; without one the node uses the development key
	levels    []time.Duration
	pins      map[int]string
	services  coraldht.Services
}

func (s settings) equal(t settings) bool {
	return s.advertise == t.advertise && slices.Equal(s.bootstrap, t.bootstrap) &&
		s.keyed == t.keyed && slices.Equal(s.levels, t.levels) &&
		maps.Equal(s.pins, t.pins) && s.services == t.services
}

// plan is validated options ready to start a node: everything that can
// fail before the node starts has been done.
type plan struct {
	listen netip.AddrPort
	cfg    coraldht.Config // with the key
	boot   []netip.AddrPort
	st     settings
	keys   []string     // fingerprints of cfg.Key and cfg.AcceptedKeys, in that order
	log    *slog.Logger // this package's messages
}

// keysEqual reports whether p and q configure the same keyring.
func (p plan) keysEqual(q plan) bool { return slices.Equal(p.keys, q.keys) }

func (o Options) plan() (plan, error) {
	if err := o.Validate(); err != nil {
		return plan{}, err
	}
	listen := netip.AddrPortFrom(o.Listen.Addr().Unmap(), o.Listen.Port())
	p := plan{listen: listen, cfg: o.config(), boot: slices.Clone(o.Bootstrap)}
	p.st = settings{advertise: o.Advertise, bootstrap: p.boot, keyed: o.KeyFile != "",
		levels: p.cfg.Levels, pins: p.cfg.Pins, services: o.Services}
	for i, path := range append([]string{o.KeyFile}, o.AcceptedKeyFiles...) {
		if path == "" {
			continue
		}
		k, err := coraldht.LoadKeyFile(path)
		if err != nil {
			return plan{}, err
		}
		if i == 0 {
			p.cfg.Key = k
		} else {
			p.cfg.AcceptedKeys = append(p.cfg.AcceptedKeys, k)
		}
		p.keys = append(p.keys, k.Fingerprint())
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.log = log.With("listen", listen.String())
	return p, nil
}
