//go:build linux

package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// A stub resolver's retransmission, glibc's defaults with one name
// server (resolv.conf(5): timeout:5, attempts:2): the query again after
// stubTimeout without an answer, and given up stubTimeout after that. A
// resolver may drop a query rather than answer it late: Unbound (as
// Debian ships it, discard-timeout) drops the reply to a query that took
// over 1.9 s to resolve, and keeps resolving, so that the stub's next
// try is answered from its cache. On a loaded machine a site's first
// resolution of a Coralized name (the root, the TLD, the coral zone, then
// each level zone's servers) can take that long.
const (
	stubTimeout  = 5 * time.Second
	stubAttempts = 2
)

// Lookup asks the client's resolver, from the client's address, for
// name's A records, as a stub resolver does (no cache of its own; the
// query sent again after stubTimeout). It returns the addresses in the
// answer's order, the smallest TTL and how long the resolution took.
func (c *Client) Lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, time.Duration, error) {
	return c.lookup(ctx, name, stubTimeout)
}

// lookup is Lookup with the time an attempt waits for its answer.
func (c *Client) lookup(ctx context.Context, name string, timeout time.Duration) ([]netip.Addr, time.Duration, time.Duration, error) {
	var conn net.Conn
	err := c.Host.Do(func() (err error) {
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: c.Addr.AsSlice()}}
		conn, err = d.DialContext(ctx, "udp", netip.AddrPortFrom(c.Resolver, PortDNS).String())
		return err
	})
	if err != nil {
		return nil, 0, 0, err
	}
	defer conn.Close()
	start := time.Now()
	deadline := start.Add(stubAttempts * timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	dc := &dns.Conn{Conn: conn, UDPSize: 1232}
	var r *dns.Msg
	for attempt := 1; r == nil; attempt++ {
		if err := dc.WriteMsg(m); err != nil {
			return nil, 0, time.Since(start), err
		}
		try := time.Now().Add(timeout)
		if attempt == stubAttempts || deadline.Before(try) {
			try = deadline
		}
		_ = conn.SetReadDeadline(try)
		for {
			got, err := dc.ReadMsg()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && try.Before(deadline) {
				break // the next attempt
			}
			if err != nil {
				return nil, 0, time.Since(start), err
			}
			if got.Id == m.Id {
				r = got
				break
			}
		}
	}
	took := time.Since(start)
	if r.Rcode != dns.RcodeSuccess {
		return nil, 0, took, fmt.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
	}
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				addrs = append(addrs, ip.Unmap())
			}
			if t := time.Duration(a.Hdr.Ttl) * time.Second; ttl < 0 || t < ttl {
				ttl = t
			}
		}
	}
	if len(addrs) == 0 {
		return nil, 0, took, fmt.Errorf("%s: no A record", name)
	}
	return addrs, ttl, took, nil
}

// HTTPClient is an HTTP client that connects from the client's address
// (a fresh connection per request, as the paper's clients made).
func (c *Client) HTTPClient(timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := c.Host.Do(func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: c.Addr.AsSlice()}}
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Fetch is one request through a proxy and what came back.
type Fetch struct {
	Proxy       netip.Addr
	Status      int
	Body        []byte
	CacheStatus string
	Took        time.Duration
}

// Get fetches http://host/path from the proxy at proxy (port 80).
func Get(ctx context.Context, hc *http.Client, proxy netip.Addr, host, path string) (*Fetch, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+netip.AddrPortFrom(proxy, PortHTTP).String()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return &Fetch{Proxy: proxy, Took: time.Since(start)}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	f := &Fetch{Proxy: proxy, Status: resp.StatusCode, Body: body, CacheStatus: resp.Header.Get("Cache-Status"), Took: time.Since(start)}
	return f, err
}

// Source reads a coral_proxy Cache-Status ("coral; hit;
// detail=\"local\"", "coral; fwd=uri-miss; detail=\"peer-l2\"",
// "coral; fwd=uri-miss; collapsed; detail=\"origin\"") into where the
// bytes came from: local, collapsed (joined a download in progress; via
// is where that download got them), peer-l<level>, origin, or other.
func Source(cacheStatus string) (source, via string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(cacheStatus), "coral;")
	if !ok {
		return "none", ""
	}
	var hit, collapsed, miss, uncached bool
	detail := ""
	for _, part := range strings.Split(rest, ";") {
		part = strings.TrimSpace(part)
		switch {
		case part == "hit":
			hit = true
		case part == "collapsed":
			collapsed = true
		case part == "fwd=uri-miss":
			miss = true
		case part == "stored=false":
			uncached = true
		case strings.HasPrefix(part, "detail="):
			detail = strings.Trim(strings.TrimPrefix(part, "detail="), `"`)
		}
	}
	switch {
	case hit && detail == "local":
		return "local", ""
	case uncached:
		return "other", detail
	case collapsed:
		return "collapsed", detail
	case miss && (detail == "origin" || strings.HasPrefix(detail, "peer-l")):
		return detail, ""
	}
	return "other", detail
}
