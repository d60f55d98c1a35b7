// Package icmpprobe is Coral's one use of ICMP, shared by the node and the
// DNS server: Prober measures the RTT to a host with echo requests (the DNS
// server's client classification), and TraceRouters and TraceLastHops find
// the routers on a path with one burst of TTL-limited echo requests (the
// node's locality hints, the DNS server's proximity to a client). Both open
// their sockets through listen and take hostile input without panicking.
//
// Neither can be answered by someone off the path: every echo request
// carries a random nonce of its own and a random sequence number, and an
// answer counts only when it matches its probe's destination and nonce (a
// router's error must quote a datagram sent to the trace's destination,
// and the probe's nonce as far as the quote goes). One probe seen at the
// attacker's own address tells nothing about the next.
package icmpprobe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/icmp"
)

// ErrUnavailable is wrapped by the errors of NewProber when no ICMP socket can be
// opened, of a Prober's Probe when there is none for the address's family,
// and of the traces and CanTrace when the process may not open the socket a
// trace needs.
var ErrUnavailable = errors.New("icmpprobe: ICMP unavailable")

// sockKind is the kind of ICMP socket.
type sockKind int

const (
	// kindDatagram is an unprivileged ICMP datagram ("ping") socket
	// (Linux: the process's group must be in net.ipv4.ping_group_range,
	// which covers IPv6 too). The kernel sets the echo identifier itself
	// and hands the socket only the echo replies carrying it.
	kindDatagram sockKind = iota
	// kindRaw is a raw ICMP socket (CAP_NET_RAW). It sees every ICMP
	// message the host receives, so replies are matched on an identifier
	// of our own as well.
	kindRaw
)

func (k sockKind) String() string {
	switch k {
	case kindDatagram:
		return "datagram"
	case kindRaw:
		return "raw"
	default:
		return "unknown"
	}
}

// listen opens the first kind of socket in kinds that can be opened for the
// family, on the wildcard address. Its error joins the reason for each kind
// tried.
func listen(v6 bool, kinds ...sockKind) (*icmp.PacketConn, sockKind, error) {
	var errs []error
	for _, kind := range kinds {
		var network, address string
		switch {
		case kind == kindDatagram && !v6:
			network, address = "udp4", "0.0.0.0"
		case kind == kindDatagram && v6:
			network, address = "udp6", "::"
		case kind == kindRaw && !v6:
			network, address = "ip4:icmp", "0.0.0.0"
		case kind == kindRaw && v6:
			network, address = "ip6:ipv6-icmp", "::"
		default:
			continue
		}
		pc, err := icmp.ListenPacket(network, address)
		if err == nil {
			return pc, kind, nil
		}
		errs = append(errs, fmt.Errorf("%s socket: %w", kind, err))
	}
	if len(errs) == 0 {
		return nil, 0, errors.New("no socket kind to try")
	}
	return nil, 0, errors.Join(errs...)
}

// peerAddr returns the IP of a raw or datagram ICMP socket's peer, without
// zone (replies are matched, and hints made, on the address alone).
func peerAddr(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.IPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// ICMP types and protocol numbers as plain bytes, for parsing by hand.
const (
	icmp4EchoReply   = 0
	icmp4Unreach     = 3
	icmp4Echo        = 8
	icmp4TimeExceed  = 11
	icmp6Unreach     = 1
	icmp6TimeExceed  = 3
	icmp6Echo        = 128
	icmp6EchoReply   = 129
	protoICMP4       = 1
	protoICMP6       = 58
	ipv6HeaderLength = 40
)
