package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The node's own addresses are origins like no other: a service on this
// machine that listens on every interface and is private only by a
// firewall (the metrics, the admin API, a database) answers the proxy on
// the machine's public address, which the private-address policy lets
// through. So the guard also refuses every address of the node itself:
//
//   - the addresses of its network interfaces (net.InterfaceAddrs), which
//     are also what a listener bound to 0.0.0.0 or :: answers on;
//   - the address every listening socket of this process is bound to:
//     Caddy's servers, its admin endpoint, the DSHT's UDP socket (from
//     /proc on Linux), and the DSHT nodes' listen addresses;
//   - the addresses it advertises: the DSHT node's (what DNS hands out for
//     this proxy) and peer_address.
//
// allow_origins lets such an address through only when it lists that very
// address (a bare address, or a /32 or /128): a wider prefix such as
// 127.0.0.0/8 allows other local origins, not the node itself.
//
// The set is read again every selfRefresh, so addresses that come and go
// (DHCP, a new listener after a reload) are seen within that time.

// selfRefresh is how often the node's addresses are read again.
const selfRefresh = 30 * time.Second

// selfAddresses is the set of the node's own addresses, read from its
// sources at most every selfRefresh.
type selfAddresses struct {
	sources []func() []netip.Addr

	// snap is the set and when it was read; a request reads it without a
	// lock. The one request that finds it stale reads the sources again
	// (refresh, under mu) while others go on with the old set: only the
	// first read ever waits.
	snap atomic.Pointer[selfSnapshot]
	mu   sync.Mutex
}

type selfSnapshot struct {
	set  map[netip.Addr]bool
	read time.Time
}

func newSelfAddresses(sources ...func() []netip.Addr) *selfAddresses {
	return &selfAddresses{sources: sources}
}

// ownAddrSources are where a proxy reads the node's own addresses: its
// interfaces, its process's listening sockets, the addresses it advertises
// (advertisedAddrs) and more (Config.OwnAddrs), if set.
func (p *Proxy) ownAddrSources(more func() []netip.Addr) []func() []netip.Addr {
	out := []func() []netip.Addr{interfaceAddrs, func() []netip.Addr { return processListenerAddrs("/proc") }, p.advertisedAddrs}
	if more != nil {
		out = append(out, more)
	}
	return out
}

// contains reports whether ip (unmapped, without zone) is one of the
// node's addresses.
func (s *selfAddresses) contains(ip netip.Addr) bool {
	if s == nil {
		return false
	}
	snap := s.snap.Load()
	switch {
	case snap == nil:
		s.mu.Lock()
		if snap = s.snap.Load(); snap == nil {
			snap = s.refreshLocked()
		}
		s.mu.Unlock()
	case s.stale(snap) && s.mu.TryLock():
		if snap = s.snap.Load(); s.stale(snap) {
			snap = s.refreshLocked()
		}
		s.mu.Unlock()
	}
	return snap.set[ip]
}

func (s *selfAddresses) stale(snap *selfSnapshot) bool {
	now := time.Now()
	return now.Sub(snap.read) >= selfRefresh || now.Before(snap.read)
}

// refreshLocked reads the sources again; s.mu is held.
func (s *selfAddresses) refreshLocked() *selfSnapshot {
	set := make(map[netip.Addr]bool)
	for _, src := range s.sources {
		for _, a := range src() {
			if a.IsValid() {
				set[a.Unmap().WithZone("")] = true
			}
		}
	}
	snap := &selfSnapshot{set: set, read: time.Now()}
	s.snap.Store(snap)
	return snap
}

// interfaceAddrs are the addresses of the machine's network interfaces.
func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip)
			}
		}
	}
	return out
}

// processListenerAddrs are the local addresses of this process's
// listening TCP sockets and bound UDP sockets, read from procDir (/proc)
// on Linux; nil where there is no such directory.
func processListenerAddrs(procDir string) []netip.Addr {
	inodes := socketInodes(filepath.Join(procDir, "self", "fd"))
	if len(inodes) == 0 {
		return nil
	}
	var out []netip.Addr
	for _, f := range []struct {
		name string
		tcp  bool
	}{{"tcp", true}, {"tcp6", true}, {"udp", false}, {"udp6", false}} {
		data, err := os.ReadFile(filepath.Join(procDir, "self", "net", f.name))
		if err != nil {
			continue
		}
		for _, s := range parseProcNet(data) {
			// TCP: LISTEN (0A). UDP sockets have no listening state; an
			// unconnected one (07) receives from anyone.
			if inodes[s.inode] && (f.tcp && s.state == 0x0A || !f.tcp && s.state == 0x07) {
				out = append(out, s.local)
			}
		}
	}
	return out
}

// socketInodes are the inodes of the sockets among the open files in fdDir.
func socketInodes(fdDir string) map[uint64]bool {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil
	}
	out := make(map[uint64]bool)
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue
		}
		if s, ok := strings.CutPrefix(target, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

// procSocket is one line of /proc/net/{tcp,tcp6,udp,udp6}.
type procSocket struct {
	local netip.Addr
	state uint8
	inode uint64
}

// parseProcNet parses a /proc/net/{tcp,tcp6,udp,udp6} table: a header
// line, then one socket a line with the local address as hex words in
// host byte order ("0100007F:1F90" is 127.0.0.1:8080 on a little-endian
// machine), the state in hex and the inode in the tenth field. Lines that
// do not parse are skipped.
func parseProcNet(data []byte) []procSocket {
	var out []procSocket
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		hexAddr, _, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		local, ok := procAddr(hexAddr)
		if !ok {
			continue
		}
		state, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			continue
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, procSocket{local: local, state: uint8(state), inode: inode})
	}
	return out
}

// procAddr decodes an address of /proc/net: 8 or 32 hex digits, 32-bit
// words in host byte order (little-endian on every machine Coral runs
// on; binary.NativeEndian).
func procAddr(s string) (netip.Addr, bool) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 && len(b) != 16 {
		return netip.Addr{}, false
	}
	for i := 0; i < len(b); i += 4 {
		binary.BigEndian.PutUint32(b[i:], binary.NativeEndian.Uint32(b[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return a, true
}
