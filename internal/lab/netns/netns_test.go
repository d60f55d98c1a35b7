//go:build linux

package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/proc"
)

func newLab(t *testing.T, needNFT bool) *Lab {
	t.Helper()
	if err := Available(needNFT); err != nil {
		t.Skipf("skipping: %v", err)
	}
	l, err := New(Options{Subnet: netip.MustParsePrefix("198.18.7.0/24"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if left := l.Namespaces(); len(left) > 0 {
			t.Errorf("namespaces left after Close: %v", left)
		}
	})
	return l
}

func addHosts(t *testing.T, l *Lab, names ...string) []*Host {
	t.Helper()
	var out []*Host
	for i, n := range names {
		h, err := l.AddHost(n, netip.AddrFrom4([4]byte{198, 18, 7, byte(10 + i)}))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

// echo serves one line back on every connection, inside h.
func echo(t *testing.T, h *Host) string {
	t.Helper()
	ln, err := h.Listen("tcp", netip.AddrPortFrom(h.Addr, 7).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func reach(from *Host, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := from.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("x")); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err
}

func TestHostsReachEachOtherNotTheRootNamespace(t *testing.T) {
	l := newLab(t, false)
	hs := addHosts(t, l, "a", "b")
	addr := echo(t, hs[1])
	if err := reach(hs[0], addr, 10*time.Second); err != nil {
		t.Fatalf("a cannot reach b: %v", err)
	}
	// Nothing of the lab shows in the root namespace.
	root, err := exec.Command("ip", "-4", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(root), "198.18.7.") {
		t.Fatalf("a lab address in the root namespace:\n%s", root)
	}
	// A program started in a host sees only the host's address.
	out, err := hs[0].Run(context.Background(), "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "198.18.7.10/24") {
		t.Fatalf("host a's eth0: %s", out)
	}
}

func TestPartitionAndHeal(t *testing.T) {
	l := newLab(t, true)
	hs := addHosts(t, l, "a", "b", "c")
	addrB, addrC := echo(t, hs[1]), echo(t, hs[2])
	if err := l.Partition([]*Host{hs[0]}, []*Host{hs[1]}); err != nil {
		t.Fatal(err)
	}
	if err := reach(hs[0], addrB, time.Second); err == nil {
		t.Fatal("a reached b across the partition")
	}
	if err := reach(hs[0], addrC, 10*time.Second); err != nil {
		t.Fatalf("a cannot reach c, which is in no group: %v", err)
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := reach(hs[0], addrB, 10*time.Second); err != nil {
		t.Fatalf("a cannot reach b after Heal: %v", err)
	}
	if err := hs[1].SetLink(false); err != nil {
		t.Fatal(err)
	}
	if err := reach(hs[0], addrB, time.Second); err == nil {
		t.Fatal("a reached b with b's link down")
	}
	if err := hs[1].SetLink(true); err != nil {
		t.Fatal(err)
	}
	if err := reach(hs[0], addrB, 10*time.Second); err != nil {
		t.Fatalf("a cannot reach b with its link up again: %v", err)
	}
}

// A run killed before Close leaves namespaces named after its pid; the
// next New removes them (and only those of dead runs).
func TestNewRemovesStaleNamespaces(t *testing.T) {
	if err := Available(false); err != nil {
		t.Skipf("skipping: %v", err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := namePrefix + itoa(dead.Process.Pid) + "-node0"
	live := namePrefix + itoa(os.Getppid()) + "-keepme"
	for _, ns := range []string{stale, live} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v %s", ns, err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", live).Run()
		_ = exec.Command("ip", "netns", "delete", stale).Run()
	})
	l := newLab(t, false)
	_ = l
	entries, _ := os.ReadDir("/run/netns")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if slices.Contains(names, stale) {
		t.Errorf("stale namespace %s still there", stale)
	}
	if !slices.Contains(names, live) {
		t.Errorf("namespace %s of a live process removed", live)
	}
}

func TestAddressOutsideTheRangeRefused(t *testing.T) {
	l := newLab(t, false)
	if _, err := New(Options{Subnet: netip.MustParsePrefix("10.0.0.0/24")}); err == nil {
		t.Fatal("New accepted 10.0.0.0/24")
	}
	if _, err := l.AddHost("x", netip.MustParseAddr("198.18.8.1")); err == nil {
		t.Fatal("AddHost accepted an address outside the subnet")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// Do must not end the OS threads it runs on: a child process started
// with a parent-death signal (internal/lab/proc) gets SIGKILL when the
// thread that forked it exits, and that may be any of the runtime's
// threads.
func TestDoKeepsChildrenOfItsThreadsAlive(t *testing.T) {
	l := newLab(t, false)
	h := addHosts(t, l, "a")[0]
	dir := t.TempDir()
	var children []*proc.Process
	for i := range 8 {
		p, err := proc.Start([]string{"sleep", "60"}, proc.Options{Log: filepath.Join(dir, "sleep"+strconv.Itoa(i)+".log")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Kill() })
		children = append(children, p)
	}
	for range 200 {
		if err := h.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range children {
		select {
		case <-p.Done():
			t.Fatalf("child %d died while Do ran: %v", i, p.ExitError())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A run killed with SIGKILL runs no Close: its reaper removes its
// namespaces within a second or two of its death. The run is this test
// binary again, as a child that builds a lab and waits to be killed.
func TestKilledRunIsCleanedUp(t *testing.T) {
	if os.Getenv("CORAL_NETNS_KILLED_CHILD") == "1" {
		l, err := New(Options{Subnet: netip.MustParsePrefix("198.18.9.0/24")})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if _, err := l.AddHost("a", netip.MustParseAddr("198.18.9.10")); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		if _, err := l.AddNamespace("r", netip.MustParseAddr("198.19.9.1")); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready", l.prefix)
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	if err := Available(false); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledRunIsCleanedUp$")
	cmd.Env = append(os.Environ(), "CORAL_NETNS_KILLED_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	prefix := strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	left := func() []string {
		var names []string
		entries, _ := os.ReadDir("/run/netns")
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				names = append(names, e.Name())
			}
		}
		return names
	}
	if n := left(); len(n) != 3 {
		t.Fatalf("the child's namespaces before the kill: %v, want switch, a and r", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(left()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("namespaces of the killed run still there after 10 s: %v", left())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
