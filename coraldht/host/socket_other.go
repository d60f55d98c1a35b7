//go:build !unix

package host

import (
	"net/netip"

	"github.com/coralcdn/coral/coraldht"
)

// socket is a listen address. Without descriptor duplication each node
// binds the address itself, and a restart binds it again once the old node
// has closed its socket.
type socket struct {
	addr netip.AddrPort
}

func openSocket(addr netip.AddrPort) (*socket, error) { return &socket{addr: addr}, nil }

func (s *socket) transport() (coraldht.Transport, error) { return coraldht.ListenUDP(s.addr.String()) }

func (s *socket) close() {}
