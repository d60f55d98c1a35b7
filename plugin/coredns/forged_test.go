//go:build linux

package coral

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestForgedSourcesProbeNobody is the regression test of issue 34's
// finding 2 (the DNS server reflects probes at anyone), through CoreDNS's
// own server on loopback: 100 UDP queries whose source addresses are
// forged (raw IP datagrams, one source per /24, each a "victim" listening
// on TCP port 53 and UDP), and then a real resolver over TCP. The forged
// sources must get no probe at all (no TCP connection to port 53, no ICMP
// echo request) and nothing larger than their query; the real resolver,
// which proved its address, is probed and classified.
func TestForgedSourcesProbeNobody(t *testing.T) {
	raw, err := net.ListenPacket("ip4:udp", "127.0.0.1")
	if err != nil {
		t.Skipf("no raw socket to forge sources with: %v", err)
	}
	defer raw.Close()
	forger, err := ipv4.NewRawConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dnsserver.Directives, "coral") {
		dnsserver.Directives = append(slices.Clone(dnsserver.Directives), "coral")
	}
	server := netip.MustParseAddrPort("127.0.141.1:5391")
	inst, err := caddy.Start(caddy.CaddyfileInput{ServerTypeName: "dns", Contents: []byte(fmt.Sprintf(`nyucd.test:%d {
	bind %s
	coral nyucd.test {
		listen %s:4300
		check_interval 100ms
		live_within 1s
	}
}`, server.Port(), server.Addr(), server.Addr()))})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	defer inst.ShutdownCallbacks()

	// The victims, and what reaches them.
	var victims []netip.Addr
	for i := range 100 {
		victims = append(victims, netip.AddrFrom4([4]byte{127, 142, byte(i), 7}))
	}
	resolver := netip.MustParseAddr("127.0.143.9")
	var synMu sync.Mutex
	syns := map[netip.Addr]int{}
	for _, a := range append(slices.Clone(victims), resolver) {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 53).String())
		if err != nil {
			t.Skipf("cannot listen on %v:53: %v", a, err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				synMu.Lock()
				syns[a]++
				synMu.Unlock()
				c.Close()
			}
		}()
	}
	var echoes atomic.Int32
	if sniff, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0"); err == nil {
		defer sniff.Close()
		p := sniff.IPv4PacketConn()
		if err := p.SetControlMessage(ipv4.FlagDst, true); err == nil {
			go func() {
				buf := make([]byte, 1500)
				for {
					n, cm, _, err := p.ReadFrom(buf)
					if err != nil {
						return
					}
					if n > 0 && buf[0] == 8 && cm != nil { // echo request
						if d, ok := netip.AddrFromSlice(cm.Dst); ok && slices.Contains(victims, d.Unmap()) {
							echoes.Add(1)
						}
					}
				}
			}()
		}
	}
	var bigger atomic.Int32 // responses to a victim longer than the query
	var responses atomic.Int32
	for _, v := range victims {
		pc, err := net.ListenPacket("udp", netip.AddrPortFrom(v, forgedPort).String())
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				responses.Add(1)
				if n > forgedQueryLen {
					bigger.Add(1)
				}
			}
		}()
	}

	// The forged flood: a referral needs the resolver's level, which needs
	// a probe of a resolver never seen.
	q := new(dns.Msg)
	q.SetQuestion("l0.nyucd.test.", dns.TypeNS)
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for _, v := range victims {
			forgeUDP(t, forger, netip.AddrPortFrom(v, forgedPort), server, wire)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // past the probes' 60 ms deadline

	// A real resolver, over TCP: probed, and answered.
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: resolver.AsSlice()}}}
	resp, _, err := c.Exchange(q, server.String())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Truncated || len(resp.Ns) == 0 {
		t.Errorf("the real resolver over TCP: %v, want the referral", resp)
	}
	time.Sleep(200 * time.Millisecond)

	synMu.Lock()
	defer synMu.Unlock()
	probed := 0
	for _, v := range victims {
		probed += syns[v]
	}
	if probed > 0 || echoes.Load() > 0 {
		t.Errorf("forged sources got %d TCP probes and %d echo requests, want none", probed, echoes.Load())
	}
	if bigger.Load() > 0 {
		t.Errorf("%d of %d responses to forged sources were longer than the query (%d octets)", bigger.Load(), responses.Load(), forgedQueryLen)
	}
	if syns[resolver] == 0 {
		t.Errorf("the real resolver, proven over TCP, was not probed")
	}
	t.Logf("forged: %d queries, %d responses back to the victims, %d probes; the real resolver: %d probe(s)",
		3*len(victims), responses.Load(), probed+int(echoes.Load()), syns[resolver])
}

const forgedPort = 33053

// forgedQueryLen is the length of the forged query's DNS message.
var forgedQueryLen = func() int {
	q := new(dns.Msg)
	q.SetQuestion("l0.nyucd.test.", dns.TypeNS)
	return q.Len()
}()

// forgeUDP sends payload to dst in a UDP datagram claiming to come from
// src.
func forgeUDP(t *testing.T, c *ipv4.RawConn, src, dst netip.AddrPort, payload []byte) {
	t.Helper()
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	// The checksum over the pseudo-header.
	var sum uint32
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	pseudo := append(append(append(s4[:], d4[:]...), 0, 17), byte(len(udp)>>8), byte(len(udp)))
	for _, b := range [][]byte{pseudo, udp} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], ^uint16(sum))
	h := &ipv4.Header{Version: 4, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(udp), TTL: 64, Protocol: 17,
		Src: src.Addr().AsSlice(), Dst: dst.Addr().AsSlice()}
	if err := c.WriteTo(h, udp, nil); err != nil {
		t.Fatalf("forging: %v", err)
	}
}
