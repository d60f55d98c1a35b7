package host

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/fleet"
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

	// Identity turns on node identity mode (coraldht's README, "Node
	// identities"): the files of this node's certificate and key, the
	// fleet's public keys and its revocation list. Nil: the network key
	// alone authenticates. A reload that changes them restarts the node;
	// the revocation list's contents are re-read every RevocationPoll
	// without one.
	Identity *IdentityFiles

	// LegacyPeers answers in full the nodes of releases before address
	// cookies, during a rolling upgrade from one (coraldht.Config's
	// LegacyPeers; docs/operations.md, "Reloads and upgrades"). A reload
	// that changes it restarts the node.
	LegacyPeers bool

	// Services are what this server runs, advertised to peers:
	// coraldht.ServiceDNS for CoreDNS, coraldht.ServiceHTTP for Caddy.
	Services coraldht.Services

	// StateDir is a directory where the node keeps its contacts across
	// process restarts (a file per listen address, written when the node
	// stops and every minute), so that a restarted node pings them and is
	// back in its network at once. Empty: they are kept across restarts in
	// place only. It is not a node setting.
	StateDir string

	// Logger receives the node's log and this package's (start, restarts,
	// bootstrap retries, joining). Nil: discarded. It is not a node
	// setting: a new logger alone does not restart the node.
	Logger *slog.Logger
}

// IdentityFiles are the files of node identity mode, as the servers'
// options name them: `identity CERT_FILE KEY_FILE`, `fleet FILE`,
// `revocations FILE [POLL]`, `identity_optional`. Make them with
// coral-fleet.
type IdentityFiles struct {
	// Certificate is this node's certificate file (coral-fleet issue).
	Certificate string `json:"certificate_file,omitempty"`
	// Key is this node's private key file, readable by its owner alone.
	Key string `json:"key_file,omitempty"`
	// Fleet is the file of the fleet public keys whose certificates and
	// revocation lists the node accepts (two while the fleet key rotates).
	Fleet string `json:"fleet_file,omitempty"`
	// Revocations is the revocation list file (coral-fleet revoke), read
	// at start and then every RevocationPoll; a newer list in it takes
	// effect without a reload. A file not there yet is no list; one that
	// goes away leaves the list in force. Empty: no revocations.
	Revocations string `json:"revocations_file,omitempty"`
	// RevocationPoll is how often the revocation list file is read. Zero:
	// DefaultRevocationPoll.
	RevocationPoll time.Duration `json:"revocations_poll,omitempty"`
	// Optional accepts datagrams without an identity: the middle step of
	// moving a fleet to identities (docs/operations.md).
	Optional bool `json:"optional,omitempty"`
}

// DefaultRevocationPoll is how often a node reads its revocation list
// file by default: a revoked node is dropped by every node within this
// long of the new list reaching their disks.
const DefaultRevocationPoll = 30 * time.Second

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
	if err := o.Identity.validate(); err != "" {
		return bad("Identity", "%s", err)
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
	cfg.LegacyPeers = o.LegacyPeers
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
	identity  IdentityFiles // the files' names, and the certificate's serial
	serial    uint64
	legacy    bool
}

func (s settings) equal(t settings) bool {
	return s.advertise == t.advertise && slices.Equal(s.bootstrap, t.bootstrap) &&
		s.keyed == t.keyed && slices.Equal(s.levels, t.levels) &&
		maps.Equal(s.pins, t.pins) && s.services == t.services &&
		s.identity == t.identity && s.serial == t.serial && s.legacy == t.legacy
}

// plan is validated options ready to start a node: everything that can
// fail before the node starts has been done.
type plan struct {
	listen   netip.AddrPort
	cfg      coraldht.Config // with the key
	boot     []netip.AddrPort
	st       settings
	keys     []string     // fingerprints of cfg.Key and cfg.AcceptedKeys, in that order
	log      *slog.Logger // this package's messages
	stateDir string       // Options.StateDir
	// identity are the identity files (nil: none): the revocation list
	// is polled from them (revocations.go).
	identity *IdentityFiles
}

// keysEqual reports whether p and q configure the same keyring.
func (p plan) keysEqual(q plan) bool { return slices.Equal(p.keys, q.keys) }

func (o Options) plan() (plan, error) {
	if err := o.Validate(); err != nil {
		return plan{}, err
	}
	listen := netip.AddrPortFrom(o.Listen.Addr().Unmap(), o.Listen.Port())
	p := plan{listen: listen, cfg: o.config(), boot: slices.Clone(o.Bootstrap), stateDir: o.StateDir}
	p.st = settings{advertise: o.Advertise, bootstrap: p.boot, keyed: o.KeyFile != "",
		levels: p.cfg.Levels, pins: p.cfg.Pins, services: o.Services, legacy: o.LegacyPeers}
	if o.Identity != nil {
		id, err := o.Identity.load()
		if err != nil {
			return plan{}, err
		}
		if err := id.Check(time.Now()); err != nil {
			return plan{}, fmt.Errorf("identity %s: %w", o.Identity.Certificate, err)
		}
		p.cfg.Identity, p.identity = id, o.Identity
		p.st.identity, p.st.serial = *o.Identity, id.Certificate.Serial
	}
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

// validate checks the identity options, without reading the files;
// it returns what is wrong, or "".
func (f *IdentityFiles) validate() string {
	switch {
	case f == nil:
		return ""
	case f.Certificate == "" || f.Key == "":
		return "identity takes the node's certificate file and its key file (identity CERT_FILE KEY_FILE)"
	case f.Fleet == "":
		return "identity needs the fleet's public keys (fleet FILE)"
	case f.RevocationPoll < 0 || (f.RevocationPoll > 0 && f.RevocationPoll < time.Second):
		return fmt.Sprintf("revocations: poll interval %v; at least 1s", f.RevocationPoll)
	}
	return ""
}

// poll is the revocation list's poll interval.
func (f *IdentityFiles) poll() time.Duration {
	if f.RevocationPoll > 0 {
		return f.RevocationPoll
	}
	return DefaultRevocationPoll
}

// load reads the identity files: the node's identity, for its
// configuration.
func (f *IdentityFiles) load() (*coraldht.Identity, error) {
	if f == nil {
		return nil, nil
	}
	keys, err := fleet.LoadPublicKeys(f.Fleet)
	if err != nil {
		return nil, err
	}
	cert, err := fleet.LoadCertificate(f.Certificate)
	if err != nil {
		return nil, err
	}
	key, err := fleet.LoadPrivateKey(f.Key, fleet.LabelNodeKey)
	if err != nil {
		return nil, err
	}
	id := &coraldht.Identity{Certificate: cert, Key: key, Fleet: keys, Optional: f.Optional}
	if f.Revocations != "" {
		if id.Revoked, err = fleet.LoadRevocationList(f.Revocations, keys); errors.Is(err, fs.ErrNotExist) {
			id.Revoked = nil // none yet: the poller installs it when it comes
		} else if err != nil {
			return nil, err
		}
	}
	return id, nil
}
