package coral

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/coralcdn/coral/coralname"
	"github.com/miekg/dns"
)

// The name scheme. With coral zone Z and n+1 levels (0..n):
//
//	Z                         coral zone apex (SOA, NS)
//	ns-<ip>.Z                 a name server host; A/AAAA synthesized from the label
//	L0.Z, L1.L0.Z, …          level zones: L<k>…L0.Z is the apex of level k's zone
//	http.L<k>…L0.Z            empty non-terminal (NODATA)
//	<origin>.http.L<k>…L0.Z   a Coralized host: A/AAAA of nearby proxies
//	A                         alias zone apex: SOA, NS and DNAME to http.L<n>…L0.Z
//	<origin>.A                DNAME, synthesized CNAME, and the target's answer
//
// <origin> is an origin part as package coralname defines it, the one the
// proxy serves; one that does not parse, or that carries Z or A again, is
// NXDOMAIN, as is everything else inside the zones.

// nameKind says where in the scheme a query name falls.
type nameKind int

const (
	kindNX         nameKind = iota // in a zone, outside the scheme
	kindCoralApex                  // Z
	kindNSHost                     // ns-<ip>.Z
	kindLevelApex                  // L<k>…L0.Z
	kindServiceENT                 // http.L<k>…L0.Z
	kindProxy                      // <origin>.http.L<k>…L0.Z
	kindAliasApex                  // A
	kindAliasBelow                 // <origin>.A
)

var kindNames = [...]string{"nx", "coral-apex", "ns-host", "level-apex", "service-ent", "proxy", "alias-apex", "alias-below"}

func (k nameKind) String() string { return kindNames[k] }

// serviceLabel is the label under a level zone that Coralized hosts sit below.
const serviceLabel = "http"

// parsedName is a query name placed in the scheme.
type parsedName struct {
	kind   nameKind
	level  int        // the level zone the name lies in (kindLevelApex, kindServiceENT, kindProxy, kindNX; -1 for the coral zone)
	nsAddr netip.Addr // kindNSHost
	// rel is the part of the name before the alias zone (kindAliasBelow) or
	// before "http.L<k>…" (kindProxy), without the trailing dot: the origin
	// part of a Coralized name.
	rel string
	// origin is the origin rel names, unless badOrigin marks an origin part
	// the proxy refuses or that carries one of our zones again (a loop
	// through the proxy): see package coralname.
	origin    coralname.Origin
	badOrigin bool
	// above marks a bad origin part that may still lie above Coralized
	// names (coralname.Zones.Above): NODATA, not NXDOMAIN.
	above bool
	// challenge marks "_acme-challenge" below the alias zone (kindAliasBelow)
	// or the DNAME target (kindProxy): TXT from the DSHT (challenge.go).
	challenge bool
}

// scheme holds the zone names of one plugin instance, lower case and fully
// qualified.
type scheme struct {
	coral     string   // Z
	alias     string   // A, or "" without an alias zone
	levelApex []string // levelApex[k] = L<k>…L0.Z
	target    string   // DNAME target: http.L<n>…L0.Z
	// levelLabel[k] is "l<k>"; zones are the coral and alias zones, which
	// no origin may carry.
	levelLabel []string
	zones      coralname.Zones
}

func newScheme(coral, alias string, levels int) (*scheme, error) {
	coral = dns.CanonicalName(coral)
	if alias != "" {
		alias = dns.CanonicalName(alias)
	}
	if levels < 1 || levels > 8 {
		return nil, fmt.Errorf("%d levels; must be 1..8", levels)
	}
	if _, ok := dns.IsDomainName(coral); !ok || coral == "." {
		return nil, fmt.Errorf("coral zone %q is not a domain name", coral)
	}
	if alias != "" {
		if _, ok := dns.IsDomainName(alias); !ok || alias == "." {
			return nil, fmt.Errorf("alias zone %q is not a domain name", alias)
		}
		if dns.IsSubDomain(coral, alias) || dns.IsSubDomain(alias, coral) {
			return nil, fmt.Errorf("alias zone %s and coral zone %s must not contain each other", alias, coral)
		}
	}
	s := &scheme{coral: coral, alias: alias}
	apex := coral
	for k := range levels {
		apex = "l" + strconv.Itoa(k) + "." + apex
		s.levelApex = append(s.levelApex, apex)
	}
	s.target = serviceLabel + "." + apex
	if len(s.target)+1 > 255 {
		return nil, fmt.Errorf("coral zone %s is too long for %d levels", coral, levels)
	}
	for k := range levels {
		s.levelLabel = append(s.levelLabel, "l"+strconv.Itoa(k))
	}
	s.zones = coralname.NewZones(coral, alias)
	return s, nil
}

// zoneApex returns the apex of level k's zone; k = -1 is the coral zone.
func (s *scheme) zoneApex(k int) string {
	if k < 0 {
		return s.coral
	}
	return s.levelApex[k]
}

// parse places name (lower case, fully qualified) in the scheme. ok is false
// when name is in neither zone. It runs on every query, so it walks the
// name in place instead of splitting it into labels.
func (s *scheme) parse(name string) (p parsedName, ok bool) {
	if s.alias != "" && underZone(name, s.alias) {
		if len(name) == len(s.alias) {
			return parsedName{kind: kindAliasApex}, true
		}
		return s.coralized(kindAliasBelow, 0, name[:len(name)-len(s.alias)-1]), true
	}
	if !underZone(name, s.coral) {
		return parsedName{}, false
	}
	if len(name) == len(s.coral) {
		return parsedName{kind: kindCoralApex}, true
	}
	// Walk up from the zone: L0, L1, … then "http", then the origin.
	rest, l := lastLabel(name[:len(name)-len(s.coral)-1])
	if l != s.levelLabel[0] {
		if rest == "" {
			if a, ok := parseNSLabel(l); ok {
				return parsedName{kind: kindNSHost, nsAddr: a}, true
			}
		}
		return parsedName{kind: kindNX, level: -1}, true
	}
	level := 0
	for rest != "" {
		rest, l = lastLabel(rest)
		if level+1 < len(s.levelLabel) && l == s.levelLabel[level+1] {
			level++
			continue
		}
		if l != serviceLabel {
			return parsedName{kind: kindNX, level: level}, true
		}
		if rest == "" {
			return parsedName{kind: kindServiceENT, level: level}, true
		}
		return s.coralized(kindProxy, level, rest), true
	}
	return parsedName{kind: kindLevelApex, level: level}, true
}

// underZone reports whether name is zone or a name below it (both lower
// case and fully qualified).
func underZone(name, zone string) bool {
	if len(name) == len(zone) {
		return name == zone
	}
	if len(name) < len(zone) || !strings.HasSuffix(name, zone) {
		return false
	}
	i := len(name) - len(zone) - 1
	return name[i] == '.' && !escaped(name, i)
}

// escaped reports whether the byte at i is escaped by an odd number of
// backslashes before it.
func escaped(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// lastLabel splits the last label off s (a name without its trailing dot),
// honouring escaped dots.
func lastLabel(s string) (rest, label string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' && !escaped(s, i) {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}

// coralized places a Coralized name whose origin part is rel: the proxy's
// grammar (coralname), with loops through either of our zones refused.
func (s *scheme) coralized(kind nameKind, level int, rel string) parsedName {
	if rel == acmetxt.Label && s.alias != "" {
		// Not an origin: where the alias zone's ACME challenge values are
		// (challenge.go).
		return parsedName{kind: kind, level: level, rel: rel, challenge: true}
	}
	o, err := s.zones.ParseOrigin(rel)
	return parsedName{kind: kind, level: level, rel: rel, origin: o, badOrigin: err != nil, above: err != nil && s.zones.Above(rel)}
}

// nsLabel names the name server host at addr: ns-192-0-2-1 for IPv4 and
// ns-<32 hex digits> for IPv6. The name is derived from the address alone,
// so every server can answer for every other server's host name and the
// name stays the same for as long as the address does.
func nsLabel(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return fmt.Sprintf("ns-%d-%d-%d-%d", b[0], b[1], b[2], b[3])
	}
	b := a.As16()
	return "ns-" + hex.EncodeToString(b[:])
}

// parseNSLabel is nsLabel's inverse; it accepts only the canonical spelling,
// so each address has exactly one name.
func parseNSLabel(l string) (netip.Addr, bool) {
	rest, ok := strings.CutPrefix(l, "ns-")
	if !ok {
		return netip.Addr{}, false
	}
	var a netip.Addr
	if len(rest) == 32 {
		var b [16]byte
		if _, err := hex.Decode(b[:], []byte(rest)); err != nil {
			return netip.Addr{}, false
		}
		a = netip.AddrFrom16(b)
		if a.Is4In6() {
			return netip.Addr{}, false
		}
	} else {
		parts := strings.Split(rest, "-")
		if len(parts) != 4 {
			return netip.Addr{}, false
		}
		var b [4]byte
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 10, 8)
			if err != nil {
				return netip.Addr{}, false
			}
			b[i] = byte(v)
		}
		a = netip.AddrFrom4(b)
	}
	if nsLabel(a) != l {
		return netip.Addr{}, false
	}
	return a, true
}

// nsHost is the fully qualified name server host name for addr.
// zoneOf is the zone p is in: the alias zone or the coral zone.
func (s *scheme) zoneOf(p parsedName) string {
	if p.kind == kindAliasApex || p.kind == kindAliasBelow {
		return s.alias
	}
	return s.coral
}

func (s *scheme) nsHost(a netip.Addr) string { return nsLabel(a) + "." + s.coral }

// aliasTarget is the DNAME substitution of rel: rel.http.L<n>…L0.Z. ok is
// false when the result would exceed 255 octets (the caller answers
// YXDOMAIN, RFC 6672 §2.2).
func (s *scheme) aliasTarget(rel string) (string, bool) {
	t := rel + "." + s.target
	if _, ok := dns.IsDomainName(t); !ok || len(t)+1 > 255 {
		return "", false
	}
	return t, true
}
