//go:build linux

// Package netns is a lab of separate hosts on one machine: each host is a
// network namespace of its own with one address in the benchmarking range
// 198.18.0.0/15, and every host's veth link ends in one bridge inside a
// "switch" namespace. Nothing in the root namespace is touched: no
// interface, address, route or firewall rule is added there, so a lab
// cannot collide with the machine or with another lab (each has its own
// switch, so two labs may even use the same addresses).
//
//	lab, err := netns.New(netns.Options{})
//	defer lab.Close()
//	origin, _ := lab.AddHost("origin", netip.MustParseAddr("198.18.0.2"))
//	ln, _ := origin.Listen("tcp", "198.18.0.2:80")       // a socket inside origin
//	p, _ := origin.Start([]string{"bin/caddy", ...}, proc.Options{...})
//	lab.Partition([]*netns.Host{a, b}, []*netns.Host{c}) // nftables drops between the groups
//	lab.Heal()
//
// Every namespace is named coral-<pid>-<host>. Close kills what runs in
// them and deletes them. A run killed before Close (SIGKILL, a test's
// time-out) leaves them to its reaper: a shell New starts in a session of
// its own, which removes them within a second of the run's death. Should
// the reaper be gone too, the next New removes every coral-<pid>- whose
// process is gone.
//
// Programs run in a host through `ip netns exec`, which execs them (the
// process is the program, so proc's process group and parent-death
// signal hold). The calling Go program reaches a host by creating sockets
// on an OS thread that has entered the host's namespace (Host.Dial,
// Host.Listen): a socket stays in the namespace it was made in.
//
// It needs root, iproute2 (`ip`) and, for partitions, nftables (`nft`);
// Available says what is missing.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/coralcdn/coral/internal/lab/proc"
)

// namePrefix starts the name of every namespace a lab creates.
const namePrefix = "coral-"

// Range is the only address range hosts may use (RFC 2544 benchmarking).
var Range = netip.MustParsePrefix("198.18.0.0/15")

// Options configure a lab.
type Options struct {
	// Subnet is the on-link prefix of every host (default 198.18.0.0/24);
	// it must lie in Range.
	Subnet netip.Prefix
	// Logf, if set, gets the commands the lab runs.
	Logf func(format string, args ...any)
}

// Lab is a set of hosts on one bridge.
type Lab struct {
	prefix string // coral-<pid>-
	subnet netip.Prefix
	logf   func(string, ...any)
	sw     string // the switch namespace

	mu          sync.Mutex
	hosts       []*Host
	partitioned []*Host
	closed      bool
	reaper      *exec.Cmd
}

// Host is one namespace with one address.
type Host struct {
	Name string // the host's short name ("node3")
	NS   string // its namespace (coral-<pid>-node3)
	Addr netip.Addr

	lab  *Lab
	veth string // its link's end in the switch
}

// Available reports why a lab cannot run here: not root, no `ip`, no
// network namespaces, and (when needNFT) no `nft`.
func Available(needNFT bool) error {
	if os.Geteuid() != 0 {
		return errors.New("netns: not root (network namespaces need CAP_SYS_ADMIN)")
	}
	if _, err := lookPath("ip"); err != nil {
		return errors.New("netns: `ip` (iproute2) not found")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("netns: no network namespace support: %w", err)
	}
	if needNFT {
		if _, err := lookPath("nft"); err != nil {
			return errors.New("netns: `nft` (nftables) not found (apt-get install nftables)")
		}
	}
	return nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := dir + "/" + name
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// New removes stale namespaces of killed runs and creates the switch.
func New(o Options) (*Lab, error) {
	if err := Available(false); err != nil {
		return nil, err
	}
	if !o.Subnet.IsValid() {
		o.Subnet = netip.MustParsePrefix("198.18.0.0/24")
	}
	if !o.Subnet.Addr().Is4() || !Range.Contains(o.Subnet.Addr()) || o.Subnet.Bits() < Range.Bits() {
		return nil, fmt.Errorf("netns: subnet %v is not inside %v", o.Subnet, Range)
	}
	l := &Lab{prefix: fmt.Sprintf("%s%d-", namePrefix, os.Getpid()), subnet: o.Subnet.Masked(), logf: o.Logf}
	if l.logf == nil {
		l.logf = func(string, ...any) {}
	}
	if err := RemoveStale(l.logf); err != nil {
		return nil, err
	}
	l.sw = l.prefix + "switch"
	if err := l.ip("netns", "add", l.sw); err != nil {
		return nil, err
	}
	if err := l.startReaper(); err != nil {
		l.Close()
		return nil, err
	}
	for _, args := range [][]string{
		{"-n", l.sw, "link", "add", "br0", "type", "bridge"},
		{"-n", l.sw, "link", "set", "br0", "up"},
		{"-n", l.sw, "link", "set", "lo", "up"},
	} {
		if err := l.ip(args...); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *Lab) ip(args ...string) error {
	l.logf("ip %s", strings.Join(args, " "))
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// RemoveStale deletes every coral-<pid>- namespace whose process is gone,
// after killing what still runs in it.
func RemoveStale(logf func(string, ...any)) error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if logf != nil {
			logf("removing stale namespace %s (its run, pid %d, is gone)", e.Name(), pid)
		}
		errs = append(errs, deleteNS(e.Name()))
	}
	return errors.Join(errs...)
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// deleteNS kills the processes in a namespace and deletes it.
func deleteNS(ns string) error {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", ns, err, bytes.TrimSpace(out))
	}
	return nil
}

// reaperScript waits for the lab's process ($1) to die and then removes
// its namespaces ($2 is their prefix), killing what still runs in them:
// a run killed with SIGKILL, or by a test's time-out, runs no Close.
const reaperScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done
for ns in $(ls /run/netns 2>/dev/null); do
	case "$ns" in "$2"*)
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
		ip netns delete "$ns" 2>/dev/null;;
	esac
done`

// startReaper starts the watcher that cleans up after a killed run: a
// shell in a session of its own, with no parent-death signal and no
// standard streams (a `go test` waiting on the test's output must not
// wait for it). Close stops it.
func (l *Lab) startReaper() error {
	cmd := exec.Command("sh", "-c", reaperScript, "coral-reaper", strconv.Itoa(os.Getpid()), l.prefix)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("netns: starting the reaper: %w", err)
	}
	l.reaper = cmd
	return nil
}

// AddNamespace creates a namespace of the lab with only lo, up, and
// nothing on the switch: for a lab that wires links of its own
// (internal/lab/wan's routers and sites). addr, in Range, is the address
// the Host reports; the caller puts it on an interface. Close removes the
// namespace with the others; SetLink does not apply.
func (l *Lab) AddNamespace(name string, addr netip.Addr) (*Host, error) {
	if !Range.Contains(addr) {
		return nil, fmt.Errorf("netns: %s: address %v is not in %v", name, addr, Range)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netns: lab closed")
	}
	for _, h := range l.hosts {
		if h.Name == name {
			l.mu.Unlock()
			return nil, fmt.Errorf("netns: host %s already in the lab", name)
		}
	}
	h := &Host{Name: name, NS: l.prefix + name, Addr: addr, lab: l}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if err := l.ip("netns", "add", h.NS); err != nil {
		return nil, err
	}
	if err := l.ip("-n", h.NS, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	return h, nil
}

// AddHost creates a host: its namespace with lo up and eth0 holding addr
// in the lab's subnet, the other end of eth0 in the switch's bridge.
func (l *Lab) AddHost(name string, addr netip.Addr) (*Host, error) {
	if !l.subnet.Contains(addr) {
		return nil, fmt.Errorf("netns: %s: address %v is not in the lab's subnet %v", name, addr, l.subnet)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netns: lab closed")
	}
	for _, h := range l.hosts {
		if h.Name == name || h.Addr == addr {
			l.mu.Unlock()
			return nil, fmt.Errorf("netns: host %s or address %v already in the lab", name, addr)
		}
	}
	h := &Host{Name: name, NS: l.prefix + name, Addr: addr, lab: l, veth: fmt.Sprintf("v%d", len(l.hosts))}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	steps := [][]string{
		{"netns", "add", h.NS},
		{"-n", l.sw, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"-n", l.sw, "link", "set", h.veth, "master", "br0", "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
		{"-n", h.NS, "addr", "add", netip.PrefixFrom(addr, l.subnet.Bits()).String(), "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := l.ip(s...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Hosts returns the lab's hosts in the order they were added.
func (l *Lab) Hosts() []*Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Host(nil), l.hosts...)
}

// Close kills every process in the lab's namespaces and deletes them. It
// may be called more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	hosts := l.hosts
	l.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		if _, err := os.Stat("/run/netns/" + h.NS); err == nil {
			errs = append(errs, deleteNS(h.NS))
		}
	}
	if _, err := os.Stat("/run/netns/" + l.sw); err == nil {
		errs = append(errs, deleteNS(l.sw))
	}
	if l.reaper != nil {
		_ = l.reaper.Process.Kill()
		_ = l.reaper.Wait()
	}
	return errors.Join(errs...)
}

// Namespaces lists the namespaces of this lab that exist now (for tests
// of Close).
func (l *Lab) Namespaces() []string {
	var out []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), l.prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Command is argv run inside the host's namespace.
func (h *Host) Command(argv ...string) []string {
	ip, err := lookPath("ip")
	if err != nil {
		ip = "ip"
	}
	return append([]string{ip, "netns", "exec", h.NS}, argv...)
}

// Start starts argv in the host (proc.Start of Command(argv)).
func (h *Host) Start(argv []string, o proc.Options) (*proc.Process, error) {
	if o.Name == "" && len(argv) > 0 {
		o.Name = h.Name + "/" + argv[0][strings.LastIndexByte(argv[0], '/')+1:]
	}
	return proc.Start(h.Command(argv...), o)
}

// Run runs argv in the host and returns its combined output.
func (h *Host) Run(ctx context.Context, argv ...string) ([]byte, error) {
	cmd := h.Command(argv...)
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s in %s: %v: %s", strings.Join(argv, " "), h.Name, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Do runs f on an OS thread inside the host's namespace and returns its
// error. Sockets f creates stay in the namespace. The thread returns to
// its own namespace afterwards; only if that fails is it thrown away (its
// goroutine exits locked). Threads are not thrown away otherwise: a child
// process whose parent-death signal is set (proc) gets it when the
// thread that started it exits, and that may be any of the runtime's
// threads.
func (h *Host) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: this thread's namespace: %w", err)
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: open %s: %w", h.NS, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: enter %s: %w", h.NS, err)
			return
		}
		ferr := f()
		if err := unix.Setns(home, unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and dies with this goroutine
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials from inside the host (for http.Transport.DialContext).
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens inside the host.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := h.Do(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ListenPacket opens a packet socket inside the host.
func (h *Host) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.Do(func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}
