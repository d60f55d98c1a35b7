package coralcaddy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coralcdn/coral/coraldht"
)

// TestReloadRestartsNodeInPlace: a config reload (Caddy's /load, as `caddy
// reload` does) that changes the coral app's node settings restarts the
// node in place: the same socket, address and ID, the new levels and pins
// in effect in the admin API's /coral/status, and a peer that knew the node
// reaches the new one at once, without joining again.
func TestReloadRestartsNodeInPlace(t *testing.T) {
	const port = 9371
	listen := netip.MustParseAddrPort("127.0.3.70:4171")
	dir := t.TempDir()
	tester := caddytest.NewTester(t)
	tester.InitServer(reloadConfig(port, listen, dir, ""), "caddyfile")
	before := coralStatus(t)
	sock := udpSocketInode(t, listen)

	cfg := coraldht.DefaultConfig()
	cfg.HintHops = 0
	tr, err := coraldht.ListenUDP("127.0.3.71:4171")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := peer.Bootstrap(ctx, listen); err != nil {
		t.Fatalf("peer joining through the proxy's node: %v", err)
	}

	tester.InitServer(reloadConfig(port, listen, dir, "levels 80ms 40ms 10ms\ncluster 3 rack"), "caddyfile")
	after := coralStatus(t)
	if after.Node == nil || after.Node.Address != before.Node.Address || after.Node.ID != before.Node.ID || after.Node.Listen != listen.String() {
		t.Fatalf("node before the reload %+v, after %+v: want the same address and ID", before.Node, after.Node)
	}
	if len(after.Levels) != 4 || after.Levels[3].Threshold != "10ms" || !after.Levels[3].Pinned ||
		after.Levels[3].Cluster != coraldht.ClusterIDFor("rack").Short() {
		t.Errorf("the new node settings are not in effect: levels %+v", after.Levels)
	}
	if after.Node.Started == nil || before.Node.Started == nil || !after.Node.Started.After(*before.Node.Started) {
		t.Errorf("the node did not restart: started %v, then %v", before.Node.Started, after.Node.Started)
	}
	if got := udpSocketInode(t, listen); got != sock {
		t.Errorf("the reload bound a new socket (inode %s, was %s)", got, sock)
	}
	if _, err := peer.Ping(ctx, listen); err != nil {
		t.Errorf("the peer cannot reach the restarted node: %v", err)
	}

	// A reload that leaves the node settings alone keeps the node.
	tester.InitServer(reloadConfig(port, listen, dir, "levels 80ms 40ms 10ms\ncluster 3 rack"), "caddyfile")
	if again := coralStatus(t); again.Node == nil || !again.Node.Started.Equal(*after.Node.Started) {
		t.Errorf("an unchanged reload restarted the node")
	}
}

func reloadConfig(port int, listen netip.AddrPort, dir, nodeSettings string) string {
	return fmt.Sprintf(`{
		skip_install_trust
		admin {$CORAL_TEST_ADMIN}
		http_port %[1]d
		grace_period 1ns
		coral {
			listen %[2]s
			%[4]s
		}
	}
	:%[1]d {
		coral_proxy nyud.test {
			cache_dir %[3]s
			allow_origins 127.0.0.0/8 127.0.0.1 # the origins run in this process: its own address, listed alone
		}
	}`, port, listen, dir, nodeSettings)
}

// coralStatus is the admin API's /coral/status.
func coralStatus(t *testing.T) adminStatus {
	t.Helper()
	// caddytest's admin address is fixed; make sure it is this process
	// (another test binary may be running its own Caddy there).
	apps, _ := runningAll()
	if len(apps) == 0 {
		t.Fatal(testAdmin + " is another process's Caddy: no coral app here")
	}
	resp, err := http.Get("http://" + testAdmin + "/coral/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Node == nil || st.Node.ID != apps[len(apps)-1].Node().ID().String() {
		t.Fatalf("/coral/status shows node %+v, not this process's", st.Node)
	}
	return st
}

// udpSocketInode is the inode of the UDP socket bound to addr, from
// /proc/net/udp: the same inode is the same socket.
func udpSocketInode(t *testing.T, addr netip.AddrPort) string {
	t.Helper()
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		t.Skipf("no /proc/net/udp: %v", err)
	}
	defer f.Close()
	ip := addr.Addr().As4()
	// The kernel prints the address as a host-order (little-endian here)
	// 32-bit number.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], addr.Port())
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == want {
			return fields[9]
		}
	}
	t.Fatalf("no UDP socket bound to %v", addr)
	return ""
}
