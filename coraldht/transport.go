package coraldht

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Transport carries datagrams for a node. Implementations must be safe for
// concurrent WriteTo calls from many goroutines and one ReadFrom loop.
type Transport interface {
	// LocalAddr is the address the transport receives on.
	LocalAddr() netip.AddrPort
	// WriteTo sends one datagram. Like UDP it may drop it silently.
	WriteTo(p []byte, to netip.AddrPort) error
	// ReadFrom blocks until a datagram arrives and copies it into p,
	// returning its length and sender. A datagram longer than p is cut to
	// len(p) (the node reads into a buffer one byte longer than MaxDatagram
	// to notice). After Close it returns ErrTransportClosed or an error
	// wrapping net.ErrClosed (as coraldht/memnet's endpoints do).
	ReadFrom(p []byte) (n int, from netip.AddrPort, err error)
	// Close releases the transport and unblocks ReadFrom.
	Close() error
}

// ErrTransportClosed is returned by a closed Transport's ReadFrom.
var ErrTransportClosed = errors.New("coraldht: transport closed")

// UDPTransport is a Transport over a UDP socket.
type UDPTransport struct {
	conn  net.PacketConn
	udp   *net.UDPConn // conn as a *net.UDPConn when it is one, for allocation-free reads
	local netip.AddrPort
}

// NewUDPTransport wraps an open packet connection, normally a *net.UDPConn.
// The transport owns it from then on and closes it in Close.
func NewUDPTransport(conn net.PacketConn) (*UDPTransport, error) {
	ap, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		return nil, fmt.Errorf("coraldht: local address %v: %w", conn.LocalAddr(), err)
	}
	t := &UDPTransport{conn: conn, local: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	if u, ok := conn.(*net.UDPConn); ok {
		t.udp = u
		// A larger receive buffer absorbs bursts of replies to parallel
		// lookups; failure to raise it is harmless.
		_ = u.SetReadBuffer(4 << 20)
	}
	return t, nil
}

// ListenUDP opens a UDP socket on addr ("127.0.0.2:4000") for a node.
func ListenUDP(addr string) (*UDPTransport, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("coraldht: listen: %w", err)
	}
	t, err := NewUDPTransport(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return t, nil
}

// LocalAddr implements Transport.
func (t *UDPTransport) LocalAddr() netip.AddrPort { return t.local }

// WriteTo implements Transport.
func (t *UDPTransport) WriteTo(p []byte, to netip.AddrPort) error {
	if t.udp != nil {
		_, err := t.udp.WriteToUDPAddrPort(p, to)
		return err
	}
	_, err := t.conn.WriteTo(p, net.UDPAddrFromAddrPort(to))
	return err
}

// ReadFrom implements Transport.
func (t *UDPTransport) ReadFrom(p []byte) (int, netip.AddrPort, error) {
	for {
		var (
			n    int
			from netip.AddrPort
			err  error
		)
		if t.udp != nil {
			n, from, err = t.udp.ReadFromUDPAddrPort(p)
		} else {
			var a net.Addr
			n, a, err = t.conn.ReadFrom(p)
			if err == nil {
				from, err = netip.ParseAddrPort(a.String())
				if err != nil {
					continue
				}
			}
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0, netip.AddrPort{}, ErrTransportClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, netip.AddrPort{}, err
			}
			// ICMP errors surface as read errors on some systems; they are
			// not fatal for a datagram socket.
			continue
		}
		return n, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nil
	}
}

// Close implements Transport.
func (t *UDPTransport) Close() error { return t.conn.Close() }
