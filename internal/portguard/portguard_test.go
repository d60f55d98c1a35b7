//go:build linux

package portguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOverlaps(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		a, b Socket
		want bool
	}{
		{TCP(ap("127.0.0.1:80")), TCP(ap("127.0.0.1:80")), true},
		{TCP(ap("127.0.0.1:80")), TCP(ap("127.0.0.2:80")), false},
		{TCP(ap("127.0.0.1:80")), TCP(ap("127.0.0.1:81")), false},
		{TCP(ap("127.0.0.1:80")), UDP(ap("127.0.0.1:80")), false},
		{TCP(ap("0.0.0.0:80")), TCP(ap("127.0.0.1:80")), true},
		{TCP(ap("127.0.0.1:80")), TCP(ap("0.0.0.0:80")), true},
		{TCP(ap("[::]:80")), TCP(ap("127.0.0.1:80")), true},
		{TCP(ap("[::]:80")), TCP(ap("[::1]:80")), true},
		{TCP(ap("0.0.0.0:80")), TCP(ap("[::1]:80")), false},
		{TCP(ap("[::ffff:127.0.0.1]:80")), TCP(ap("127.0.0.1:80")), true},
		{UDP(ap("[::]:53")), UDP(ap("0.0.0.0:53")), true},
	} {
		if got := tc.a.Overlaps(tc.b); got != tc.want {
			t.Errorf("%v overlaps %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestHostPort(t *testing.T) {
	got, err := HostPort("", "53", "udp", "tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := []Socket{UDP(netip.MustParseAddrPort("[::]:53")), TCP(netip.MustParseAddrPort("[::]:53"))}
	if !slices.Equal(got, want) {
		t.Errorf("HostPort(\"\", 53) = %v, want %v", got, want)
	}
	if got, _ := HostPort("[::1]", "8090", "tcp"); len(got) != 1 || got[0].String() != "[::1]:8090/tcp" {
		t.Errorf("HostPort([::1], 8090) = %v", got)
	}
	if got, err := DNSServer([]string{"127.0.0.2", "::1"}, "53", "dns"); err != nil || fmt.Sprint(got) != "[127.0.0.2:53/udp 127.0.0.2:53/tcp [::1]:53/udp [::1]:53/tcp]" {
		t.Errorf("DNSServer(dns) = %v %v", got, err)
	}
	if got, err := DNSServer(nil, "853", "tls"); err != nil || fmt.Sprint(got) != "[[::]:853/tcp]" {
		t.Errorf("DNSServer(tls) = %v %v", got, err)
	}
	if got, err := DNSServer(nil, "/run/dns.sock", "unix"); err != nil || got != nil {
		t.Errorf("DNSServer(unix) = %v %v", got, err)
	}
	for _, bad := range [][2]string{{"localhost", "53"}, {"127.0.0.1", "x"}, {"127.0.0.1", "70000"}} {
		if _, err := HostPort(bad[0], bad[1], "tcp"); err == nil {
			t.Errorf("HostPort(%q, %q) took it", bad[0], bad[1])
		}
	}
}

// TestMachineSockets reads the tables of testdata as /proc/net.
func TestMachineSockets(t *testing.T) {
	proc := t.TempDir()
	if err := os.CopyFS(filepath.Join(proc, "net"), os.DirFS("testdata")); err != nil {
		t.Fatal(err)
	}
	table, err := machineSockets(proc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range table {
		got = append(got, fmt.Sprintf("%v %d", e.sock, e.inode))
	}
	want := []string{
		"127.0.0.1:8080/tcp 1001", "127.0.0.2:80/tcp 1002", // 1003 is a connection
		"[::]:8090/tcp 2001",
		"127.0.0.2:4000/udp 3001", "127.0.0.2:53/udp 3002", // 3003 is connected
	}
	if !slices.Equal(got, want) {
		t.Errorf("machine sockets:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	w, other, found := conflict([]Socket{TCP(netip.MustParseAddrPort("127.0.0.3:8090"))}, table, map[uint64]bool{})
	if !found || other.inode != 2001 || w.Addr.Port() != 8090 {
		t.Errorf("127.0.0.3:8090 beside [::]:8090: conflict %v %v %v", w, other, found)
	}
	if _, _, found := conflict([]Socket{TCP(netip.MustParseAddrPort("127.0.0.3:8090"))}, table, map[uint64]bool{2001: true}); found {
		t.Error("a socket of this process counted as another's")
	}
}

// The helper process: TestMain runs it when the test binary is started
// with PORTGUARD_HOLD=network:address, holding that socket (with
// SO_REUSEPORT, as Caddy and CoreDNS bind) until its stdin closes.
func TestMain(m *testing.M) {
	if spec := os.Getenv("PORTGUARD_HOLD"); spec != "" {
		network, addr, _ := strings.Cut(spec, ":")
		c, err := listen(network, addr)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// listen binds network:addr with SO_REUSEPORT.
func listen(network, addr string) (io.Closer, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1)
		})
		return errors.Join(err, serr)
	}}
	if network == "udp" {
		return lc.ListenPacket(context.Background(), network, addr)
	}
	return lc.Listen(context.Background(), network, addr)
}

// hold starts a helper process holding network:addr and returns its pid.
func hold(t *testing.T, network, addr string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PORTGUARD_HOLD="+network+":"+addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("helper holding %s %s: %q", network, addr, line)
	}
	return cmd.Process.Pid
}

// TestCheck binds real sockets: this process's own pass, another
// process's on the same or a covering address fail, naming it.
func TestCheck(t *testing.T) {
	// A TCP listener and a UDP socket of our own, on addresses only
	// this test uses (port 0: the kernel picks).
	ln, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tcpAddr := ln.(net.Listener).Addr().(*net.TCPAddr).AddrPort()
	pc, err := listen("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	udpAddr := pc.(net.PacketConn).LocalAddr().(*net.UDPAddr).AddrPort()
	mine := []Socket{TCP(tcpAddr), UDP(udpAddr)}
	if err := Check(mine...); err != nil {
		t.Fatalf("this process's own sockets: %v", err)
	}
	owned, err := Own()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range mine {
		if !slices.Contains(owned, s) {
			t.Errorf("Own() = %v lacks %v", owned, s)
		}
	}

	// Another process on the same TCP address, with SO_REUSEPORT: the
	// kernel lets it bind, Check does not.
	pid := hold(t, "tcp", tcpAddr.String())
	if theirs, err := Of(pid); err != nil || !slices.Contains(theirs, TCP(tcpAddr)) {
		t.Errorf("Of(%d) = %v %v, want %v among them", pid, theirs, err, tcpAddr)
	}
	err = Check(TCP(tcpAddr))
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) {
		t.Fatalf("another process on %v: Check = %v", tcpAddr, err)
	}
	if inUse.PID != pid || inUse.Command == "" {
		t.Errorf("the other process is pid %d %q, want %d", inUse.PID, inUse.Command, pid)
	}
	t.Logf("%v", err)
	for _, want := range []string{tcpAddr.String() + "/tcp", fmt.Sprintf("pid %d", pid), "SO_REUSEPORT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}

	// UDP, and a wildcard of another process covering a specific address.
	hold(t, "udp", udpAddr.String())
	if err := Check(UDP(udpAddr)); !errors.Is(err, ErrInUse) {
		t.Errorf("another process on %v/udp: Check = %v", udpAddr, err)
	}
	wild, err := listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := wild.(net.Listener).Addr().(*net.TCPAddr).Port
	wild.Close() // only to learn a free port
	hold(t, "tcp", fmt.Sprintf("0.0.0.0:%d", port))
	specific := TCP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))
	if err := Check(specific); !errors.Is(err, ErrInUse) {
		t.Errorf("another process on 0.0.0.0:%d: Check(%v) = %v", port, specific, err)
	}
	if err := Check(TCP(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port+1)))); errors.Is(err, ErrInUse) && port < 65535 {
		t.Errorf("another port counted: %v", err)
	}
}

func FuzzParseTables(f *testing.F) {
	for _, name := range []string{"tcp", "tcp6", "udp"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, s := range parseInet(data, "tcp") {
			if !s.sock.Addr.IsValid() {
				t.Fatalf("an invalid address from %q", data)
			}
		}
	})
}

// TestCheckDuringReload: a reload binds new listeners beside the old ones
// and closes the old ones while the new configuration starts (Caddy's
// admin API closes its old listener in a goroutine of its own on every
// configuration load). A listener this process closes while Check reads
// the socket tables is still this process's: Check must never name it as
// another's. Before Check read this process's files on both sides of the
// table, a clean-clone CI run refused a key rotation's reload this way.
func TestCheckDuringReload(t *testing.T) {
	ln, err := listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.(net.Listener).Addr().(*net.TCPAddr).AddrPort()
	stop := make(chan struct{})
	replaced := make(chan int)
	go func() {
		n := 0
		defer func() { replaced <- n }()
		old := ln
		for {
			select {
			case <-stop:
				old.Close()
				return
			default:
			}
			next, err := listen("tcp", addr.String())
			if err != nil {
				t.Error(err)
				old.Close()
				return
			}
			old.Close()
			old = next
			n++
		}
	}()
	var checks int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) || checks < 200; checks++ {
		if err := Check(TCP(addr)); err != nil {
			t.Errorf("check %d, while this process replaces its own listener: %v", checks, err)
			break
		}
	}
	close(stop)
	t.Logf("%d checks while the listener was replaced %d times", checks, <-replaced)
}
