package wire

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Services is the set of services a node runs, advertised in every RPC so
// applications can ask Nodes for, say, HTTP proxies only.
type Services uint32

const (
	// ServiceDNS marks a node that runs the Coral DNS server.
	ServiceDNS Services = 1 << iota
	// ServiceHTTP marks a node that runs the Coral HTTP proxy.
	ServiceHTTP
	// ServiceNonRecursive marks a proxy that is handed out only to clients on
	// its own network (for example one behind a metered link).
	ServiceNonRecursive
)

// CapExtensions is not a service but a capability carried in the same
// word: the node reads the extension area after a message body (address
// cookies, identities; PROTOCOL.md, Extensions). Nodes released before
// it ignore unknown bits of the word, so a node sends extensions only to
// peers that advertise it.
const CapExtensions Services = 1 << 31

// capabilities are the bits of the services word that are not services.
const capabilities = CapExtensions

var serviceNames = []string{"dns", "http", "non-recursive"}

// String lists the services as "dns|http"; "none" for the empty set.
// Capability bits are not services and are left out.
func (s Services) String() string {
	s &^= capabilities
	if s == 0 {
		return "none"
	}
	var parts []string
	for i, name := range serviceNames {
		if s&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if rest := s &^ (1<<len(serviceNames) - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}

// Has reports whether s includes every service in want.
func (s Services) Has(want Services) bool { return s&want == want }

// ClusterInfo describes one cluster a node belongs to, as carried in every
// RPC header.
type ClusterInfo struct {
	Level   int       // 0..MaxLevels-1
	ID      ID        // all zeros at level 0
	LogSize float64   // estimated log2 of the member count, in steps of 1/8
	Created time.Time // creation time, whole seconds
}

// Contact identifies a node: its ID, the address it advertises and the
// services it runs.
type Contact struct {
	ID       ID
	Addr     netip.AddrPort
	Services Services
}

func (c Contact) String() string { return c.ID.Short() + "@" + c.Addr.String() }

// CheckAddr rejects addresses no peer could send to.
func CheckAddr(a netip.AddrPort) error {
	ip := a.Addr()
	switch {
	case !a.IsValid():
		return fmt.Errorf("invalid address")
	case ip.IsUnspecified():
		return fmt.Errorf("%v is unspecified; advertise a specific address", a)
	case ip.IsMulticast():
		return fmt.Errorf("%v is multicast", a)
	case ip.Zone() != "":
		return fmt.Errorf("%v has a zone; zones cannot be advertised", a)
	case a.Port() == 0:
		return fmt.Errorf("%v has port 0", a)
	}
	return nil
}
