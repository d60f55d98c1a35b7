package coraldht

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Services is the set of services a node runs, advertised in every RPC so
// applications can ask Nodes for, say, HTTP proxies only.
type Services = wire.Services

const (
	// ServiceDNS marks a node that runs the Coral DNS server.
	ServiceDNS = wire.ServiceDNS
	// ServiceHTTP marks a node that runs the Coral HTTP proxy.
	ServiceHTTP = wire.ServiceHTTP
	// ServiceNonRecursive marks a proxy that is handed out only to clients on
	// its own network (for example one behind a metered link).
	ServiceNonRecursive = wire.ServiceNonRecursive
)

// MaxLevels is the largest number of cluster levels (level 0 included) the
// wire format carries.
const MaxLevels = wire.MaxLevels

const (
	// MaxDatagram is the largest datagram a node sends or accepts. It stays
	// under the IPv6 minimum MTU so no datagram is ever fragmented.
	MaxDatagram = wire.MaxDatagram

	// MaxValueSizeLimit is the largest value the wire format can carry in a
	// store request with a full header.
	MaxValueSizeLimit = wire.MaxValueSizeLimit

	// MaxAppPayload is the largest payload an app request or reply
	// carries (CallApp, HandleApp): what fits a datagram under a full
	// header, rounded down.
	MaxAppPayload = wire.MaxAppPayload
)

// Config holds a node's settings. Start from DefaultConfig; every field's
// comment gives its default and why.
type Config struct {
	// Advertise is the UDP address other nodes use to reach this node; the
	// node ID is SHA-1 of it. Zero means the transport's local address, which
	// must then be a specific address (not 0.0.0.0 or ::).
	Advertise netip.AddrPort

	// Key is the network key shared by all nodes of one Coral network. Every
	// datagram carries an HMAC-SHA256 tag made with it. Nil is allowed only on
	// loopback: the node then uses a fixed development key that offers no
	// protection. Load one with LoadKeyFile.
	Key *Key

	// AcceptedKeys are further network keys the node accepts but does not
	// send with, during a key rotation (see Keyring); with Key, at most
	// KeyringSize. Default: none.
	AcceptedKeys []*Key

	// Services this node runs; advertised to peers. Default: none.
	Services Services

	// Levels holds the RTT thresholds of cluster levels 1..n, slowest first;
	// level 0, the global cluster, has no threshold. Default [60ms, 20ms], the
	// deployed three-level hierarchy. Thresholds must decrease.
	Levels []time.Duration

	// B is the number of ID bits each lookup step corrects. Default 1: the
	// smallest steps spread load on hot keys best (the paper's setting).
	B int

	// Alpha is the most RPCs a lookup keeps outstanding. Default 3: extra RPCs
	// are sent only when a hop is slow or dead, to hide it.
	Alpha int

	// BucketSize is k, the contacts per routing-table bucket and the contacts
	// a reply carries. Default 8, as in Kademlia deployments.
	BucketSize int

	// FullValues is l: a node holding this many values for a key, all
	// expiring no sooner than half the new value's lifetime, is full. It is
	// also the most values a node keeps per key. Default 4.
	FullValues int

	// Leak is β: a node that has seen more than this many requests for a key
	// in the last minute is loaded; under load it still lets one request
	// through every minute/β. Default 12 (one every 5 s).
	Leak int

	// Replicas is how many nodes a put stores its value on: the nearest
	// acceptable nodes of the reverse-phase stack. It is also how many of
	// the nodes nearest a key a lookup must hear from before it concludes.
	// Default 3: with one copy (the published algorithm) a tenth of the
	// nodes failing loses a tenth of the references, with two about 1 %,
	// with three about 0.1 % (see eval/lookup).
	Replicas int

	// MaxValueSize bounds a value in bytes. Default 256: applications store
	// addresses and flags; the wire format allows up to MaxValueSizeLimit.
	MaxValueSize int

	// MaxTTL bounds a value's lifetime. Default 24h: values are soft state and
	// the longest the applications ask for is 2h.
	MaxTTL time.Duration

	// MaxValues bounds the values a node stores over all keys and levels, and
	// MaxKeys the distinct keys. When a store would exceed either, the value
	// expiring soonest in the whole store is evicted (for MaxKeys, its whole
	// key) if it expires before the new one; otherwise the store is refused.
	// Defaults 65536 and 16384: tens of megabytes at most.
	MaxValues int
	MaxKeys   int

	// MaxStoreBytes bounds the bytes of all stored values. Default 16 MiB,
	// what MaxValues values of the default MaxValueSize take.
	MaxStoreBytes int

	// SourceShare is the largest share of the store's bounds (values,
	// keys, bytes) that one source IP address may hold; a /24 (IPv6 /48)
	// may hold twice as much, and one source at most half of FullValues
	// under one key. A store beyond its share takes the place of the
	// source's own soonest-expiring value. However full, a store evicts
	// from the prefix holding the most values first, so no member can
	// lock honest values out with long lifetimes. Default 1/4.
	SourceShare float64

	// MaxTrackedKeys bounds the per-key request counters behind "loaded".
	// The counters of the key idle longest go first. Default 65536.
	MaxTrackedKeys int

	// InitialRPCTimeout is the RPC timeout for a peer with no RTT samples
	// when the node has none at all either. Default 1s, as TCP's initial RTO.
	InitialRPCTimeout time.Duration

	// MinRPCTimeout and MaxRPCTimeout clamp the adaptive per-peer timeout
	// (smoothed RTT + 4×variance, RFC 6298). Defaults 50ms and 2s.
	MinRPCTimeout time.Duration
	MaxRPCTimeout time.Duration

	// LookupTimeout bounds one level of a get, put or put+get even when the
	// caller's context has no deadline; a lookup that reaches it ends with
	// what it has found. Default 3s: on a worldwide network a level-0
	// lookup takes about 0.6 s at the median and under 3 s even right after
	// a tenth of the nodes died (eval/lookup).
	LookupTimeout time.Duration

	// MaxFailures is how many consecutive unanswered RPCs make a contact bad:
	// it is no longer handed out and the first replacement takes its place.
	// Default 2: one lost datagram does not condemn a node.
	MaxFailures int

	// QuestionableAfter is how long a contact may go unheard before it is
	// pinged when a newcomer wants its bucket slot. Default 15m.
	QuestionableAfter time.Duration

	// ContactsPerIP bounds the contacts from one IP address in each
	// routing table (one per level), and half of it in each bucket:
	// several nodes may share a host (a DNS server and a proxy), but one
	// member listening on many ports must not fill a table. Default 4.
	ContactsPerIP int

	// ContactsPerSubnet bounds the contacts from one /24 (IPv6 /48) in
	// each routing table, and half a bucket in each bucket; the node's own
	// /24 (its site-mates) is exempt. Default 16.
	ContactsPerSubnet int

	// LegacyPeers answers in full the requests of nodes released before
	// address cookies (PROTOCOL.md, Address cookies), which cannot prove
	// their address, as those releases expect. Set it only during a
	// rolling upgrade from such a release: while it is set, anyone holding
	// the network key can have this node send replies larger than their
	// requests to any address. Default false: such requests get only
	// replies no larger than themselves, and no stores.
	LegacyPeers bool

	// Identity turns on node identity mode (README, "Node identities"):
	// every datagram also carries this node's certificate and signature,
	// and datagrams are accepted only under certificates the fleet signed
	// and has not revoked. All nodes of the network must run a release
	// that has it. Default nil: the network key alone authenticates.
	Identity *Identity

	// TrustMembers turns off what keeps one member of the network from
	// controlling a node: address proofs, routing-table caps, the secret
	// rank, cluster claims measured, store shares and the bound on replies
	// to unproven sources (the behaviour before issue 35). For comparison
	// experiments (eval/members); never in production.
	TrustMembers bool

	// RefreshInterval: a bucket no lookup has touched for this long is
	// refreshed by a lookup of a random ID in its range. Default 15m.
	RefreshInterval time.Duration

	// NodesLiveWithin is how recently a contact must have been heard from to
	// be returned by Nodes. Default 1m.
	NodesLiveWithin time.Duration

	// MaxClockSkew is how far a datagram's timestamp may be from this node's
	// clock. Older or newer datagrams are dropped without reply. Default 30s.
	MaxClockSkew time.Duration

	// ReorderWindow is how far behind a sender's newest timestamp a datagram
	// may arrive and still be accepted (once). Default 2s: reordering on real
	// paths is far shorter, and a replay is refused either way.
	ReorderWindow time.Duration

	// ClusterInterval is how often the node reconsiders its cluster at each
	// level above 0, from the RTTs, cluster sizes and ages its RPCs have
	// gathered. Default 5m, the deployed setting: clusters follow changes in
	// the network within minutes while the probing stays negligible.
	ClusterInterval time.Duration

	// JoinFraction: a cluster is acceptable to join when at least this share
	// of the members sampled is under the level's threshold. LeaveFraction:
	// the node leaves its cluster when at least this share of the members it
	// has measured are over the threshold. Defaults 0.8 and 0.5, the paper's
	// values; the gap between them keeps a node from flapping at the edge.
	JoinFraction  float64
	LeaveFraction float64

	// ValidateMembers is how many members of a candidate cluster the node
	// contacts before it joins, so one fast member cannot lure it into a
	// cluster that is far away on the whole. Default 4.
	ValidateMembers int

	// Pins fixes the node's cluster at some levels, by name: level → name,
	// with cluster ID ClusterIDFor(name). A pinned level never re-clusters:
	// operators use it for policy (a site's nodes always together) and tests
	// for determinism. Levels must be 1..len(Levels). Default none.
	Pins map[int]string

	// HintHops is how many router hops out the start-up traceroute looks
	// (toward the bootstrap nodes) for routers whose /24 prefixes serve as
	// locality hints; 0 disables the traceroute. It needs raw ICMP sockets
	// and is skipped cleanly without them, and on simulated transports.
	// Default 5.
	HintHops int

	// HintPrefixes are extra locality hints: prefixes (a /24 or /48 is
	// typical) under which the node publishes its address and looks for
	// others, for example the upstream network of a site. Default none.
	HintPrefixes []netip.Prefix

	// HintPrivate lets private, loopback, link-local and shared (CGNAT)
	// addresses serve as hints. Off by default: such prefixes repeat across
	// unrelated networks, so nodes far apart would take each other for
	// neighbours. Tests and single-organisation deployments turn it on.
	HintPrivate bool

	// PlainDHT turns the node into a conventional DHT for comparison
	// experiments: lookups go straight to the closest known node and puts
	// store there, ignoring full and loaded. Never use it in production.
	PlainDHT bool

	// Seed seeds the node's pseudo-random choices (request IDs, cluster IDs,
	// refresh targets). Zero picks a random seed.
	Seed uint64

	// Logger receives debug and warning messages. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		Levels:            []time.Duration{60 * time.Millisecond, 20 * time.Millisecond},
		B:                 1,
		Alpha:             3,
		BucketSize:        8,
		FullValues:        4,
		Leak:              12,
		Replicas:          3,
		MaxValueSize:      256,
		MaxTTL:            24 * time.Hour,
		MaxValues:         65536,
		MaxKeys:           16384,
		MaxStoreBytes:     16 << 20,
		SourceShare:       0.25,
		MaxTrackedKeys:    65536,
		InitialRPCTimeout: time.Second,
		MinRPCTimeout:     50 * time.Millisecond,
		MaxRPCTimeout:     2 * time.Second,
		LookupTimeout:     3 * time.Second,
		MaxFailures:       2,
		QuestionableAfter: 15 * time.Minute,
		ContactsPerIP:     4,
		ContactsPerSubnet: 16,
		RefreshInterval:   15 * time.Minute,
		NodesLiveWithin:   time.Minute,
		MaxClockSkew:      30 * time.Second,
		ReorderWindow:     2 * time.Second,
		ClusterInterval:   5 * time.Minute,
		JoinFraction:      0.8,
		LeaveFraction:     0.5,
		ValidateMembers:   4,
		HintHops:          5,
	}
}

// Validate reports the first field that is out of range, by name.
func (c *Config) Validate() error {
	for _, check := range []func() *ConfigError{c.validateLevels, c.validateKeys, c.validateProtocol, c.validateRPC, c.validateClustering, c.validateNames, c.validateIdentity} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// A ConfigError is a Config field that does not validate.
type ConfigError struct {
	Field string // the Config field: "Levels", "Pins", …
	Msg   string // what is wrong with its value
}

func (e *ConfigError) Error() string { return "coraldht: config " + e.Field + ": " + e.Msg }

func badConfig(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// validateLevels checks the RTT thresholds.
func (c *Config) validateLevels() *ConfigError {
	if len(c.Levels)+1 > MaxLevels {
		return badConfig("Levels", "%d thresholds; at most %d", len(c.Levels), MaxLevels-1)
	}
	for i, th := range c.Levels {
		if th <= 0 {
			return badConfig("Levels", "threshold of level %d is %v; must be positive", i+1, th)
		}
		if i > 0 && th >= c.Levels[i-1] {
			return badConfig("Levels", "threshold of level %d (%v) must be below level %d's (%v)", i+1, th, i, c.Levels[i-1])
		}
	}
	return nil
}

// validateKeys checks the keyring's keys.
func (c *Config) validateKeys() *ConfigError {
	if len(c.AcceptedKeys) > 0 && c.Key == nil {
		return badConfig("AcceptedKeys", "accepted keys need a primary Key")
	}
	if len(c.AcceptedKeys)+1 > KeyringSize {
		return badConfig("AcceptedKeys", "%d keys; a keyring holds at most %d, the primary included", len(c.AcceptedKeys)+1, KeyringSize)
	}
	if slices.Contains(c.AcceptedKeys, nil) {
		return badConfig("AcceptedKeys", "nil key")
	}
	return nil
}

// validateProtocol checks the lookup and storage parameters, some bounded
// by what a datagram carries.
func (c *Config) validateProtocol() *ConfigError {
	switch {
	case c.B < 1 || c.B > 16:
		return badConfig("B", "%d; must be 1..16", c.B)
	case c.Alpha < 1 || c.Alpha > 16:
		return badConfig("Alpha", "%d; must be 1..16", c.Alpha)
	case c.BucketSize < 1 || c.BucketSize > wire.MaxContacts-closingHints:
		return badConfig("BucketSize", "%d; must be 1..%d (a reply carries one bucket and %d hints)", c.BucketSize, wire.MaxContacts-closingHints, closingHints)
	case c.FullValues < 1 || c.FullValues > 64:
		return badConfig("FullValues", "%d; must be 1..64", c.FullValues)
	case c.Leak < 1:
		return badConfig("Leak", "%d; must be at least 1", c.Leak)
	case c.Replicas < 1 || c.Replicas > 8:
		return badConfig("Replicas", "%d; must be 1..8", c.Replicas)
	case c.MaxValueSize < 1 || c.MaxValueSize > MaxValueSizeLimit:
		return badConfig("MaxValueSize", "%d; must be 1..%d", c.MaxValueSize, MaxValueSizeLimit)
	case c.MaxTTL < time.Second || c.MaxTTL > wire.MaxTTL:
		return badConfig("MaxTTL", "%v; must be 1s..%v", c.MaxTTL, wire.MaxTTL)
	case c.MaxValues < 1:
		return badConfig("MaxValues", "%d; must be positive", c.MaxValues)
	case c.MaxKeys < 1:
		return badConfig("MaxKeys", "%d; must be positive", c.MaxKeys)
	case c.MaxTrackedKeys < 1:
		return badConfig("MaxTrackedKeys", "%d; must be positive", c.MaxTrackedKeys)
	case c.MaxStoreBytes < c.MaxValueSize:
		return badConfig("MaxStoreBytes", "%d; must hold at least one value of MaxValueSize (%d)", c.MaxStoreBytes, c.MaxValueSize)
	case !(c.SourceShare > 0 && c.SourceShare <= 1):
		return badConfig("SourceShare", "%v; must be in (0, 1]", c.SourceShare)
	case c.ContactsPerIP < 1:
		return badConfig("ContactsPerIP", "%d; must be at least 1", c.ContactsPerIP)
	case c.ContactsPerSubnet < c.ContactsPerIP:
		return badConfig("ContactsPerSubnet", "%d; must be at least ContactsPerIP (%d)", c.ContactsPerSubnet, c.ContactsPerIP)
	}
	return nil
}

// validateRPC checks the RPC timeouts and the liveness rules.
func (c *Config) validateRPC() *ConfigError {
	switch {
	case c.MinRPCTimeout <= 0:
		return badConfig("MinRPCTimeout", "%v; must be positive", c.MinRPCTimeout)
	case c.MaxRPCTimeout < c.MinRPCTimeout:
		return badConfig("MaxRPCTimeout", "%v is below MinRPCTimeout %v", c.MaxRPCTimeout, c.MinRPCTimeout)
	case c.InitialRPCTimeout < c.MinRPCTimeout || c.InitialRPCTimeout > c.MaxRPCTimeout:
		return badConfig("InitialRPCTimeout", "%v; must lie within MinRPCTimeout..MaxRPCTimeout", c.InitialRPCTimeout)
	case c.LookupTimeout < c.MaxRPCTimeout:
		return badConfig("LookupTimeout", "%v is below MaxRPCTimeout %v", c.LookupTimeout, c.MaxRPCTimeout)
	case c.MaxFailures < 1:
		return badConfig("MaxFailures", "%d; must be at least 1", c.MaxFailures)
	case c.QuestionableAfter <= 0:
		return badConfig("QuestionableAfter", "%v; must be positive", c.QuestionableAfter)
	case c.RefreshInterval <= 0:
		return badConfig("RefreshInterval", "%v; must be positive", c.RefreshInterval)
	case c.NodesLiveWithin <= 0:
		return badConfig("NodesLiveWithin", "%v; must be positive", c.NodesLiveWithin)
	case c.MaxClockSkew < time.Second:
		return badConfig("MaxClockSkew", "%v; must be at least 1s", c.MaxClockSkew)
	case c.ReorderWindow <= 0 || c.ReorderWindow > c.MaxClockSkew:
		return badConfig("ReorderWindow", "%v; must be positive and at most MaxClockSkew", c.ReorderWindow)
	}
	return nil
}

// validateClustering checks the clustering rounds and hints.
func (c *Config) validateClustering() *ConfigError {
	switch {
	case c.ClusterInterval < time.Second:
		return badConfig("ClusterInterval", "%v; must be at least 1s", c.ClusterInterval)
	case !(c.JoinFraction > 0 && c.JoinFraction <= 1):
		return badConfig("JoinFraction", "%v; must be in (0, 1]", c.JoinFraction)
	case !(c.LeaveFraction > 0 && c.LeaveFraction <= 1):
		return badConfig("LeaveFraction", "%v; must be in (0, 1]", c.LeaveFraction)
	case c.ValidateMembers < 1 || c.ValidateMembers > 32:
		return badConfig("ValidateMembers", "%d; must be 1..32", c.ValidateMembers)
	case c.HintHops < 0 || c.HintHops > 16:
		return badConfig("HintHops", "%d; must be 0..16", c.HintHops)
	}
	return nil
}

// validateNames checks the pins, hint prefixes and advertised address.
func (c *Config) validateNames() *ConfigError {
	for lvl, name := range c.Pins {
		if lvl < 1 || lvl > len(c.Levels) {
			return badConfig("Pins", "level %d; this configuration has levels 1..%d to pin (level 0 is the global cluster)", lvl, len(c.Levels))
		}
		if strings.TrimSpace(name) == "" {
			return badConfig("Pins", "level %d has an empty cluster name", lvl)
		}
	}
	for _, p := range c.HintPrefixes {
		if !p.IsValid() {
			return badConfig("HintPrefixes", "invalid prefix")
		}
	}
	if c.Advertise.IsValid() {
		if err := wire.CheckAddr(c.Advertise); err != nil {
			return badConfig("Advertise", "%v", err)
		}
	}
	return nil
}

// ClusterInfo describes one cluster a node belongs to, as carried in every
// RPC header.
type ClusterInfo = wire.ClusterInfo

// Contact identifies a node: its ID, the address it advertises and the
// services it runs.
type Contact = wire.Contact

// validateIdentity checks the node's identity against its fleet now.
func (c *Config) validateIdentity() *ConfigError {
	if c.Identity == nil {
		return nil
	}
	if err := c.Identity.Check(time.Now()); err != nil {
		return badConfig("Identity", "%v", err)
	}
	return nil
}
