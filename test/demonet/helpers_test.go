//go:build linux

package demonet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dn "github.com/coralcdn/coral/internal/lab/demonet"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// prefix is this package's /24: the demo itself (make demo) uses
// 127.0.80.0/24, so the tests can run beside it.
var prefix = netip.MustParsePrefix("127.0.81.0/24")

// The resolvers the tests start: Unbound and BIND are required; Knot
// Resolver and PowerDNS Recursor join when installed.
var (
	requiredKinds = []resolvers.Kind{resolvers.Unbound, resolvers.BIND}
	optionalKinds = []resolvers.Kind{resolvers.Knot, resolvers.PowerDNS}
)

var shared struct {
	once    sync.Once
	net     *dn.Net
	err     error
	skip    string
	curl    string
	started time.Duration
}

// TestMain stops the shared network after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.net != nil {
		if err := shared.net.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demonet: stopping the network:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// network returns the shared demo network, starting it on first use. It
// skips the test when the network cannot run here (not root, a binary or
// resolver missing), or fails it when CI=true.
func network(t *testing.T) *dn.Net {
	t.Helper()
	shared.once.Do(startShared)
	if shared.skip != "" {
		msg := "demonet: cannot run here (`make deps coredns caddy` as root): " + shared.skip
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "\nCI=true, so this is a failure, not a skip")
		}
		t.Skip(msg)
	}
	if shared.err != nil {
		t.Fatalf("starting the demo network: %v", shared.err)
	}
	if err := shared.net.Check(); err != nil {
		t.Fatalf("the network is broken: %v", err)
	}
	return shared.net
}

func startShared() {
	kinds := slices.Clone(requiredKinds)
	for _, k := range optionalKinds {
		if resolvers.Available(k) == nil {
			kinds = append(kinds, k)
		}
	}
	o := dn.Options{Prefix: prefix, Resolvers: kinds}
	var why []string
	if err := dn.Available(o); err != nil {
		why = append(why, err.Error())
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		why = append(why, "curl: "+err.Error())
	}
	if len(why) > 0 {
		shared.skip = strings.Join(why, "; ")
		return
	}
	shared.curl = curl
	if os.Getenv("DEMONET_LOG") != "" {
		o.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "demonet: "+format+"\n", args...) }
	}
	start := time.Now()
	shared.net, shared.err = dn.Start(context.Background(), o)
	shared.started = time.Since(start)
	if shared.err == nil {
		fmt.Fprintf(os.Stderr, "demonet: network of %d nodes and %d resolvers ready in %v (%s)\n",
			len(shared.net.Nodes), len(shared.net.Resolvers), shared.started.Round(time.Millisecond), shared.net.Dir)
	}
}

// runID makes URLs unique per test run, so -count=N starts from cold
// caches each time.
var runCounter atomic.Int64

func runID(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e9, runCounter.Add(1))
}

// response is what curl got.
type response struct {
	Proto    string // "HTTP/1.1", "HTTP/2"
	Status   int
	Header   http.Header
	Body     []byte
	RemoteIP string
}

func (r *response) cacheStatus() string { return r.Header.Get("Cache-Status") }

// curl runs the real curl with args (plus its output options) and returns
// the last response it received.
func curl(t *testing.T, args ...string) (*response, error) {
	t.Helper()
	dir := t.TempDir()
	hdrs, body := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	full := append([]string{"-sS", "--max-time", "20", "-D", hdrs, "-o", body, "-w", "%{http_code} %{remote_ip}"}, args...)
	cmd := exec.Command(shared.curl, full...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("curl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, err
	}
	r := &response{Header: http.Header{}}
	code, ip, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if r.Status, err = strconv.Atoi(code); err != nil {
		return nil, fmt.Errorf("curl -w: %q", out)
	}
	r.RemoteIP = ip
	if r.Body, err = os.ReadFile(body); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	hb, err := os.ReadFile(hdrs)
	if err != nil {
		return nil, err
	}
	// -D holds every response's header block; keep the last.
	blocks := strings.Split(strings.TrimRight(string(hb), "\r\n"), "\r\n\r\n")
	tp := textproto.NewReader(bufio.NewReader(strings.NewReader(blocks[len(blocks)-1] + "\r\n\r\n")))
	status, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	r.Proto, _, _ = strings.Cut(status, " ")
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, fmt.Errorf("parsing curl's headers: %v\n%s", err, hb)
	}
	r.Header = http.Header(mh)
	return r, nil
}

// fetch GETs a Coralized path through the given proxies, which curl tries
// in order (as a client does with the addresses DNS gave it).
func fetch(t *testing.T, n *dn.Net, via []netip.Addr, pathQuery string, args ...string) (*response, error) {
	t.Helper()
	var addrs []string
	for _, a := range via {
		addrs = append(addrs, a.String())
	}
	host := n.CoralHost()
	all := append([]string{"--resolve", fmt.Sprintf("%s:%d:%s", host, dn.PortHTTP, strings.Join(addrs, ","))}, args...)
	return curl(t, append(all, n.URL(pathQuery))...)
}

// mustFetch is fetch that fails the test on a transport error or a status
// other than 200, and checks the body against the site's page.
func mustFetch(t *testing.T, n *dn.Net, via []netip.Addr, pathQuery string, args ...string) *response {
	t.Helper()
	r, err := fetch(t, n, via, pathQuery, args...)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("%s via %v: status %d, Cache-Status %q", pathQuery, via, r.Status, r.cacheStatus())
	}
	checkBody(t, pathQuery, r)
	return r
}

// checkBody compares a response body with the origin's bytes for the path.
func checkBody(t *testing.T, pathQuery string, r *response) {
	t.Helper()
	path, _, _ := strings.Cut(pathQuery, "?")
	p := dn.Site()[path]
	if p == nil {
		t.Fatalf("no page %s on the site", path)
	}
	if string(r.Body) != string(p.Body) {
		t.Errorf("%s: body of %d bytes differs from the origin's %d bytes", pathQuery, len(r.Body), len(p.Body))
	}
}

// wantSource checks the Cache-Status of a response.
func wantSource(t *testing.T, what string, r *response, want string) {
	t.Helper()
	t.Logf("%s: %s (from %s)", what, r.cacheStatus(), r.RemoteIP)
	if got := r.cacheStatus(); got != want {
		t.Errorf("%s: Cache-Status %q, want %q", what, got, want)
	}
}

// waitFor polls cond every 50 ms until it returns nil; past the deadline
// the test fails with cond's last error.
func waitFor(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cached returns node's cache entry for the origin URL of pathQuery.
func cached(n *dn.Net, nd *dn.Node, pathQuery string) (*dn.CacheObject, error) {
	objs, err := nd.CacheObjects()
	if err != nil {
		return nil, err
	}
	want := "http://" + n.OriginHost + pathQuery
	for i := range objs {
		if objs[i].URL == want {
			return &objs[i], nil
		}
	}
	return nil, fmt.Errorf("%s has no %s (%d objects)", nd.Addr, want, len(objs))
}

// waitCommitted waits until node has the whole object in its cache (the
// download that served the client may still be committing it).
func waitCommitted(t *testing.T, n *dn.Net, nd *dn.Node, pathQuery string) *dn.CacheObject {
	t.Helper()
	var obj *dn.CacheObject
	waitFor(t, fmt.Sprintf("%s cached at node %d", pathQuery, nd.Index), 10*time.Second, func() error {
		o, err := cached(n, nd, pathQuery)
		if err != nil {
			return err
		}
		if o.Writing {
			return errors.New("still being written")
		}
		obj = o
		return nil
	})
	return obj
}

// nodesIn returns the running nodes of a region.
func nodesIn(n *dn.Net, region string) []*dn.Node {
	var out []*dn.Node
	for _, nd := range n.Nodes {
		if nd.Region == region && nd.Caddy.Running() {
			out = append(out, nd)
		}
	}
	return out
}

// nodeIndex is the index of the node with address a, or -1.
func nodeIndex(n *dn.Net, a netip.Addr) int {
	if nd := n.NodeAt(a); nd != nil {
		return nd.Index
	}
	return -1
}
