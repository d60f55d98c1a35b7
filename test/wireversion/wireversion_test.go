package wireversion

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// skipOrFail skips the test for a missing prerequisite, or fails it under
// CI=true, where the prerequisites are there.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true, so this is a failure, not a skip)")
	}
	t.Skip(msg)
}

// buildPrevious extracts coraldht, go.mod and go.sum of the recorded
// commit into a temporary module, adds the driver and builds it.
func buildPrevious(t *testing.T) (bin, commit string) {
	t.Helper()
	return buildRecorded(t, "coraldht/testdata/previous-wire-version")
}

// buildRecorded is buildPrevious for the commit recorded in the file
// record (a path from the repository's root).
func buildRecorded(t *testing.T, record string) (bin, commit string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(filepath.Join(root, record))
	if err != nil {
		t.Fatal(err)
	}
	commit = strings.TrimSpace(string(rec))
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "no git: the previous wire version is built from git archive %s", commit)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		skipOrFail(t, "%s is not a git checkout holding commit %s (%s): %v %s", root, commit, record, err, out)
	}
	dir := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", commit, "coraldht", "go.mod", "go.sum")
	tar := exec.Command("tar", "-x", "-C", dir)
	// One buffer each: the two processes write their errors concurrently.
	var archiveErrs, tarErrs bytes.Buffer
	archive.Stderr, tar.Stderr = &archiveErrs, &tarErrs
	if tar.Stdin, err = archive.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := tar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v %s", commit, err, archiveErrs.String())
	}
	if err := tar.Wait(); err != nil {
		t.Fatalf("tar: %v %s", err, tarErrs.String())
	}
	src, err := os.ReadFile("testdata/driver/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "cmd/driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cmd/driver/main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "driver")
	build := exec.Command("go", "build", "-o", bin, "./cmd/driver")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building coraldht of %s with the driver: %v\n%s", commit, err, out)
	}
	return bin, commit
}

// previousNode is the driver process.
type previousNode struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func (p *previousNode) do(cmd string) string {
	p.t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		p.t.Fatal(err)
	}
	if !p.out.Scan() {
		p.t.Fatalf("%s: the previous-version node exited (%v)", cmd, p.out.Err())
	}
	return p.out.Text()
}

// networkKey writes a new network key file and returns it with the key.
func networkKey(t *testing.T) (string, *coraldht.Key) {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "network.key")
	if err := coraldht.WriteKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := coraldht.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return keyFile, key
}

// startDriver starts the driver bin on addr with the key file, stopped
// when the test ends.
func startDriver(ctx context.Context, t *testing.T, bin, addr, keyFile string) *previousNode {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "-listen", addr, "-key", keyFile)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
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
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	p := &previousNode{t: t, in: in, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() || !strings.HasPrefix(p.out.Text(), "ready ") {
		t.Fatalf("the node of %s did not start: %q", bin, p.out.Text())
	}
	return p
}

// TestPreviousWireVersion: a node of the recorded previous commit and one
// of this checkout join through each other (both directions) and each gets
// what the other put. The current node runs with LegacyPeers, as during a
// rolling upgrade from a release before address cookies (PROTOCOL.md,
// Versions): the previous node cannot prove its address, and a current
// node with the default configuration refuses it every reply larger than
// its request, which the end of the test checks.
func TestPreviousWireVersion(t *testing.T) {
	bin, commit := buildPrevious(t)
	keyFile, key := networkKey(t)

	// The current node holds the network key and one more (a rotation
	// under way): the previous node has no keyring and must not notice.
	other, err := coraldht.NewKey(bytes.Repeat([]byte{9}, coraldht.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := coraldht.ListenUDP("127.0.180.41:4000")
	if err != nil {
		t.Fatal(err)
	}
	cfg := coraldht.DefaultConfig()
	cfg.Key, cfg.AcceptedKeys = key, []*coraldht.Key{other}
	cfg.LegacyPeers = true
	cur, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prevAddr = "127.0.180.40:4000"
	prev := startDriver(ctx, t, bin, prevAddr, keyFile)

	// The previous node joins through the current one, and the current
	// one through the previous one.
	if got := prev.do("join " + cur.Addr().String()); got != "ok" {
		t.Fatalf("previous node joining through the current one: %s", got)
	}
	if err := cur.Bootstrap(ctx, netip.MustParseAddrPort(prevAddr)); err != nil {
		t.Fatalf("current node joining through the previous one: %v", err)
	}
	if got := prev.do("put from-previous v-previous"); got != "ok" {
		t.Fatalf("previous node's put: %s", got)
	}
	if _, err := cur.Put(ctx, coraldht.KeyFor("from-current"), []byte("v-current"), time.Minute); err != nil {
		t.Fatalf("current node's put: %v", err)
	}
	// The value crossed the wire: the previous node stored it here, or
	// this node fetched it from there.
	r, err := cur.Get(ctx, coraldht.KeyFor("from-previous"))
	if err != nil || len(r.Values) != 1 || string(r.Values[0].Data) != "v-previous" ||
		(r.From.Addr.String() != prevAddr && cur.Stats().RequestsIn.Store == 0) {
		t.Fatalf("current node's get of the previous node's value: %+v, %v; want v-previous, stored by or fetched from %s", r, err, prevAddr)
	}
	if got := prev.do("get from-current"); got != "value v-current" {
		t.Fatalf("previous node's get of the current node's value: %s", got)
	}
	s := cur.Stats()
	if s.Drops.Malformed != 0 || s.Drops.BadAuth != 0 || len(s.Keys) != 2 || s.Keys[0].Accepted == 0 || s.RequestsIn.Total() == 0 || s.RepliesIn.Total() == 0 {
		t.Fatalf("current node: drops %+v, keys %+v; want no malformed or bad-key drops, requests and replies from the previous node, its datagrams under the primary", s.Drops, s.Keys)
	}
	t.Logf("node of %s and this checkout: joined both ways, put and got both ways; %d datagrams accepted from it", commit[:7], s.Keys[0].Accepted)

	// A current node with the default configuration: the previous node's
	// pings are answered (the reply is no larger), its lookups are not.
	tr2, err := coraldht.ListenUDP("127.0.180.42:4000")
	if err != nil {
		t.Fatal(err)
	}
	cfg.LegacyPeers = false
	strict, err := coraldht.NewNode(cfg, tr2)
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	// It knows the others, so that its find_node replies carry contacts.
	if err := strict.Bootstrap(ctx, cur.Addr()); err != nil {
		t.Fatal(err)
	}
	joined := prev.do("join " + strict.Addr().String())
	if d := strict.Stats().Drops; d.Unproven == 0 || d.Malformed != 0 {
		st := strict.Stats()
		t.Fatalf("a current node with the default configuration: drops %+v, requests in %+v, replies out %+v (join: %s); want the previous node's lookups refused as unproven",
			d, st.RequestsIn, st.RepliesOut, joined)
	}
	if st := strict.Stats(); st.RepliesOut.Ping == 0 {
		t.Fatal("the previous node's pings went unanswered")
	}
}

// TestLoadToNodesBeforeIt: the load entry (PROTOCOL.md, Extensions) is an
// extension that nodes of the release before it (the commit in
// coraldht/testdata/before-load-wire-version, which reads extensions but
// not this one) keep unread. A current node that publishes a load and a
// node of that commit join through each other and read each other's
// values, the old node drops none of the current node's datagrams as
// malformed, and the current node sees no load from the old one.
func TestLoadToNodesBeforeIt(t *testing.T) {
	bin, commit := buildRecorded(t, "coraldht/testdata/before-load-wire-version")
	keyFile, key := networkKey(t)
	tr, err := coraldht.ListenUDP("127.0.180.44:4000")
	if err != nil {
		t.Fatal(err)
	}
	cfg := coraldht.DefaultConfig()
	cfg.Key = key
	cfg.Services = coraldht.ServiceHTTP
	cur, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	cur.SetLoad(coraldht.Load{Known: true, Bandwidth: 91, Requests: 12, Disk: 3})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const oldAddr = "127.0.180.43:4000"
	old := startDriver(ctx, t, bin, oldAddr, keyFile)
	if got := old.do("join " + cur.Addr().String()); got != "ok" {
		t.Fatalf("old node joining through the current one: %s", got)
	}
	if err := cur.Bootstrap(ctx, netip.MustParseAddrPort(oldAddr)); err != nil {
		t.Fatalf("current node joining through the old one: %v", err)
	}
	if got := old.do("put from-old v-old"); got != "ok" {
		t.Fatalf("old node's put: %s", got)
	}
	if _, err := cur.Put(ctx, coraldht.KeyFor("from-current"), []byte("v-current"), time.Minute); err != nil {
		t.Fatalf("current node's put: %v", err)
	}
	if r, err := cur.Get(ctx, coraldht.KeyFor("from-old")); err != nil || len(r.Values) != 1 || string(r.Values[0].Data) != "v-old" {
		t.Fatalf("current node's get of the old node's value: %+v, %v", r, err)
	}
	if got := old.do("get from-current"); got != "value v-current" {
		t.Fatalf("old node's get of the current node's value: %s", got)
	}
	if _, err := cur.Ping(ctx, netip.MustParseAddrPort(oldAddr)); err != nil {
		t.Fatal(err)
	}
	if got := old.do("malformed"); got != "malformed 0" {
		t.Errorf("the old node dropped datagrams carrying the load as malformed: %s", got)
	}
	if l := cur.PeerLoad(netip.MustParseAddrPort(oldAddr)); l.Known {
		t.Errorf("a load from a node that publishes none: %+v", l)
	}
	if s := cur.Stats(); s.Drops.Malformed != 0 || s.RequestsIn.Total() == 0 {
		t.Errorf("current node: drops %+v, requests in %+v", s.Drops, s.RequestsIn)
	}
	t.Logf("node of %s and a current node publishing a load: joined, put and got both ways; no malformed drops", commit[:7])
}
