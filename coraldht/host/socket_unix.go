//go:build unix

package host

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/coralcdn/coral/coraldht"
)

// socket is a listen address's UDP socket, bound while any handle holds
// the address. Each node gets a duplicate of its descriptor: closing the
// node closes the duplicate, and the socket stays bound for the next one.
type socket struct {
	conn *net.UDPConn
}

func openSocket(addr netip.AddrPort) (*socket, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("coraldht: listen: %w", err)
	}
	return &socket{conn: conn}, nil
}

// transport returns a transport for one node on the socket.
func (s *socket) transport() (coraldht.Transport, error) {
	f, err := s.conn.File() // a duplicate descriptor
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pc, err := net.FilePacketConn(f) // another, owned by the node
	if err != nil {
		return nil, err
	}
	tr, err := coraldht.NewUDPTransport(pc)
	if err != nil {
		_ = pc.Close()
		return nil, err
	}
	return tr, nil
}

func (s *socket) close() { _ = s.conn.Close() }
