//go:build linux

package coralnet

import (
	"context"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// Lookup asks the client's resolver for name's A records, from the
// client's host, and returns them and the answer's smallest TTL.
func (c *Client) Lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	conn, err := c.Host.DialContext(ctx, "udp", netip.AddrPortFrom(c.Resolver, PortDNS).String())
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	dc := &dns.Conn{Conn: conn, UDPSize: 1232}
	if err := dc.WriteMsg(m); err != nil {
		return nil, 0, err
	}
	resp, err := dc.ReadMsg()
	if err != nil {
		return nil, 0, err
	}
	out, ttl, err := resolvers.AnswerA(name, resp)
	return out, time.Duration(ttl) * time.Second, err
}
