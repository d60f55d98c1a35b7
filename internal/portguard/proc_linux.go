//go:build linux

package portguard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const procRoot = "/proc"

// The socket states of /proc/net that mean "serves": a TCP listener
// (TCP_LISTEN); a UDP socket that is not connected (TCP_CLOSE, 07), which
// receives from anyone.
const (
	stateListen  = 0x0A
	stateUnbound = 0x07
)

func check(proc string, socks []Socket) error {
	if len(socks) == 0 {
		return nil
	}
	// A conflict counts when the same socket (inode) shows in every
	// snapshot.
	var seen map[uint64]bool
	for i := range recheckTimes {
		table, mine, err := snapshot(proc)
		if err != nil {
			return err
		}
		now := make(map[uint64]bool)
		for _, e := range table {
			if i == 0 || seen[e.inode] {
				now[e.inode] = true
			}
		}
		w, other, found := conflict(socks, onlyInodes(table, now), mine)
		if !found {
			return nil
		}
		if i == recheckTimes-1 {
			e := &InUseError{Socket: w, Other: other.sock}
			e.PID, e.Command = socketOwner(proc, other.inode)
			return e
		}
		seen = now
	}
	return nil
}

// recheckTimes is how many snapshots must all show the same conflicting
// socket before Check reports it. A socket this process opens and closes
// while one snapshot is taken shows in the socket table under an inode
// no longer among its files (a reload replaces its listeners); another
// process's listener is still there, under the same inode, the next
// times.
const recheckTimes = 3

// onlyInodes is the entries of table whose inodes keep holds.
func onlyInodes(table []entry, keep map[uint64]bool) []entry {
	var out []entry
	for _, e := range table {
		if keep[e.inode] {
			out = append(out, e)
		}
	}
	return out
}

// snapshot reads the machine's serving sockets and the inodes of this
// process's sockets. The process's open files are read before and after
// the table, and a socket counts as its own when it is among either: a
// reload closes listeners while the table is read (Caddy's admin API
// closes its old listener on every configuration load), and a listener
// closed between the table and a single read of the files would look
// like another process's.
func snapshot(proc string) ([]entry, map[uint64]bool, error) {
	fdDir := filepath.Join(proc, "self", "fd")
	before, err := socketInodes(fdDir)
	if err != nil {
		return nil, nil, err
	}
	table, err := machineSockets(proc)
	if err != nil {
		return nil, nil, err
	}
	after, err := socketInodes(fdDir)
	if err != nil {
		return nil, nil, err
	}
	for n := range after {
		before[n] = true
	}
	return table, before, nil
}

// socketsOf lists the serving sockets of process pid ("self": this one).
func socketsOf(proc, pid string) ([]Socket, error) {
	table, err := machineSockets(proc)
	if err != nil {
		return nil, err
	}
	mine, err := socketInodes(filepath.Join(proc, pid, "fd"))
	if err != nil {
		return nil, err
	}
	var out []Socket
	for _, e := range table {
		if mine[e.inode] {
			out = append(out, e.sock)
		}
	}
	return out, nil
}

// machineSockets reads the serving sockets of this network namespace.
// The IPv6 tables are missing on a kernel without IPv6, which is fine;
// the IPv4 ones must be there.
func machineSockets(proc string) ([]entry, error) {
	var out []entry
	for _, t := range []struct {
		file, network string
		state         uint8
		optional      bool
	}{
		{"tcp", "tcp", stateListen, false}, {"tcp6", "tcp", stateListen, true},
		{"udp", "udp", stateUnbound, false}, {"udp6", "udp", stateUnbound, true},
	} {
		data, err := os.ReadFile(filepath.Join(proc, "net", t.file))
		if err != nil {
			if t.optional && os.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("portguard: %w", err)
		}
		for _, e := range parseInet(data, t.network) {
			if e.state == t.state {
				out = append(out, e.entry)
			}
		}
	}
	return out, nil
}

// inetSocket is a line of /proc/net/{tcp,tcp6,udp,udp6}.
type inetSocket struct {
	entry
	state uint8
}

// parseInet reads a /proc/net/{tcp,tcp6,udp,udp6} table: a header line,
// then a socket a line, "sl local_address rem_address st ... inode ...",
// the local address as 32-bit hex words in host byte order and a hex
// port ("0100007F:1F90" is 127.0.0.1:8080 on a little-endian machine),
// the state in hex and the inode in the tenth field. Lines that do not
// parse are skipped.
func parseInet(data []byte, network string) []inetSocket {
	var out []inetSocket
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		hexIP, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		ip, ok := hexAddr(hexIP)
		port, err := strconv.ParseUint(hexPort, 16, 16)
		state, err2 := strconv.ParseUint(f[3], 16, 8)
		inode, err3 := strconv.ParseUint(f[9], 10, 64)
		if !ok || err != nil || err2 != nil || err3 != nil {
			continue
		}
		s := Socket{Network: network, Addr: netip.AddrPortFrom(ip, uint16(port))}
		out = append(out, inetSocket{entry: entry{sock: s, inode: inode}, state: uint8(state)})
	}
	return out
}

// hexAddr decodes /proc/net's 8 or 32 hex digits: 32-bit words in host
// byte order (binary.NativeEndian).
func hexAddr(s string) (netip.Addr, bool) {
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

// socketInodes reads the inodes of the sockets among the open files of
// fdDir (/proc/self/fd).
func socketInodes(fdDir string) (map[uint64]bool, error) {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("portguard: %w", err)
	}
	out := make(map[uint64]bool, len(entries))
	for _, e := range entries {
		if n, ok := socketInode(filepath.Join(fdDir, e.Name())); ok {
			out[n] = true
		}
	}
	return out, nil
}

// socketInode reads a /proc/PID/fd link "socket:[INODE]".
func socketInode(link string) (uint64, bool) {
	target, err := os.Readlink(link)
	if err != nil {
		return 0, false
	}
	s, ok := strings.CutPrefix(target, "socket:[")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return n, err == nil
}

// socketOwner finds the process holding the socket inode, where /proc
// shows the other processes' open files (root, or the same user without
// ProtectProc).
func socketOwner(proc string, inode uint64) (pid int, command string) {
	dirs, err := os.ReadDir(proc)
	if err != nil {
		return 0, ""
	}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(proc, d.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if n, ok := socketInode(filepath.Join(proc, d.Name(), "fd", fd.Name())); ok && n == inode {
				comm, _ := os.ReadFile(filepath.Join(proc, d.Name(), "comm"))
				return p, strings.TrimSpace(string(comm))
			}
		}
	}
	return 0, ""
}
