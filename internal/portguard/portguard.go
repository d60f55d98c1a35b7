package portguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// A Socket is an address a server serves on.
type Socket struct {
	// Network is "tcp" or "udp".
	Network string
	// Addr is the socket's address; an unspecified IP (0.0.0.0, ::) is
	// every address of its family (:: both families).
	Addr netip.AddrPort
}

// TCP and UDP build Sockets.
func TCP(a netip.AddrPort) Socket { return Socket{Network: "tcp", Addr: a} }
func UDP(a netip.AddrPort) Socket { return Socket{Network: "udp", Addr: a} }

// String is "127.0.0.1:80/tcp" or "[::]:53/udp".
func (s Socket) String() string {
	return s.Addr.String() + "/" + s.Network
}

// HostPort is the Sockets of a server that listens on host:port with the
// given networks ("tcp", "udp"): host is an IP literal, or "" (or "*")
// for every address.
func HostPort(host string, port string, networks ...string) ([]Socket, error) {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("portguard: port %q: %w", port, err)
	}
	ip := netip.IPv6Unspecified()
	if host != "" && host != "*" {
		if ip, err = netip.ParseAddr(strings.Trim(host, "[]")); err != nil {
			return nil, fmt.Errorf("portguard: address %q is not an IP address", host)
		}
	}
	var out []Socket
	for _, n := range networks {
		out = append(out, Socket{Network: n, Addr: netip.AddrPortFrom(ip.WithZone(""), uint16(p))})
	}
	return out, nil
}

// DNSServer is the Sockets of a DNS server on each of hosts ("" for
// every address) at port, by its transport as CoreDNS names them: "dns"
// is UDP and TCP; "tls", "https" and "grpc" TCP; "quic" and "https3"
// UDP. Other transports (CoreDNS's "unix") give none: see the package
// documentation.
func DNSServer(hosts []string, port, transport string) ([]Socket, error) {
	networks := map[string][]string{"dns": {"udp", "tcp"}, "tls": {"tcp"}, "https": {"tcp"}, "grpc": {"tcp"},
		"quic": {"udp"}, "https3": {"udp"}}[transport]
	if networks == nil {
		return nil, nil
	}
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	var out []Socket
	for _, h := range hosts {
		ss, err := HostPort(h, port, networks...)
		if err != nil {
			return nil, err
		}
		out = append(out, ss...)
	}
	return out, nil
}

// Overlaps reports whether a and b take traffic from each other: the same
// transport and port on equal addresses, or on an address and an
// unspecified one that covers it.
func (s Socket) Overlaps(o Socket) bool {
	if s.Network != o.Network || s.Addr.Port() != o.Addr.Port() {
		return false
	}
	a, b := s.Addr.Addr().Unmap(), o.Addr.Addr().Unmap()
	return a == b || covers(a, b) || covers(b, a)
}

// covers reports whether a listener on the unspecified address u also
// receives what is sent to a: :: receives both families, 0.0.0.0 IPv4.
func covers(u, a netip.Addr) bool {
	switch u {
	case netip.IPv6Unspecified():
		return true
	case netip.IPv4Unspecified():
		return a.Is4()
	}
	return false
}

// InUseError is the answer of Check for an address another process
// serves.
type InUseError struct {
	// Socket is the address asked about; Other the other process's socket
	// that overlaps it.
	Socket, Other Socket
	// PID and Command name the other process when /proc shows it (0 and
	// "" when it is hidden, as under systemd's ProtectProc=invisible).
	PID     int
	Command string
}

func (e *InUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("another process (pid %d", e.PID)
		if e.Command != "" {
			who += ", " + e.Command
		}
		who += ")"
	}
	other := ""
	if e.Other != e.Socket {
		other = " on " + e.Other.String()
	}
	return fmt.Sprintf("%s is already served by %s%s: two servers on one address would split its clients between them (SO_REUSEPORT); stop the other one or choose another address",
		e.Socket, who, other)
}

// ErrInUse matches every *InUseError with errors.Is.
var ErrInUse = errors.New("address served by another process")

// Is makes errors.Is(err, ErrInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// entry is one socket of the machine's tables.
type entry struct {
	sock  Socket
	inode uint64
}

// conflict finds, among the machine's sockets, one that overlaps a
// wanted socket and is not one of this process's (mine holds their
// inodes).
func conflict(wanted []Socket, table []entry, mine map[uint64]bool) (want Socket, other entry, found bool) {
	for _, w := range wanted {
		for _, e := range table {
			if !mine[e.inode] && e.sock.Overlaps(w) {
				return w, e, true
			}
		}
	}
	return Socket{}, entry{}, false
}

// Check returns an *InUseError for the first of socks that a socket of
// another process overlaps (a TCP listener or a bound UDP socket), and nil
// when none does. Errors reading /proc
// are returned as such: the caller decides whether to go on without the
// check.
func Check(socks ...Socket) error {
	return check(procRoot, socks)
}

// Own lists the sockets this process listens on: its TCP listeners and
// its bound UDP sockets.
func Own() ([]Socket, error) {
	return socketsOf(procRoot, "self")
}

// Of lists the sockets process pid listens on, as Own does for this one
// (where /proc shows that process's open files).
func Of(pid int) ([]Socket, error) {
	return socketsOf(procRoot, strconv.Itoa(pid))
}
