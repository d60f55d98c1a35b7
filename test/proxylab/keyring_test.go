package proxylab

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// keyringStatus is the part of /coral/status the keyring lab reads.
type keyringStatus struct {
	Node *struct {
		Started time.Time `json:"started"`
	} `json:"node"`
	DHT *struct {
		Gets        uint64            `json:"gets"`
		GetHits     uint64            `json:"get_hits"`
		GetFailures uint64            `json:"get_failures"`
		PutGets     uint64            `json:"put_gets"`
		PutFailures uint64            `json:"put_failures"`
		Timeouts    uint64            `json:"timeouts"`
		DropsBy     map[string]uint64 `json:"drops_by_reason"`
		NetworkKeys []struct {
			Fingerprint string `json:"fingerprint"`
			Primary     bool   `json:"primary"`
			Accepted    uint64 `json:"datagrams_accepted"`
		} `json:"network_keys"`
	} `json:"dht"`
}

func (p *proxy) keyringStatus(t *testing.T) keyringStatus {
	t.Helper()
	var st keyringStatus
	if err := p.admin("/coral/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.Node == nil || st.DHT == nil {
		t.Fatalf("%s: no node in /coral/status", p.name)
	}
	return st
}

func (st keyringStatus) fingerprints() []string {
	var out []string
	for _, k := range st.DHT.NetworkKeys {
		out = append(out, k.Fingerprint)
	}
	return out
}

// keyringOrigin serves /obj/N: a body of 2–34 KiB derived from the path,
// cacheable for an hour, on 127.0.180.100.
func keyringOrigin(t *testing.T) (host string, body func(path string) []byte) {
	t.Helper()
	body = func(path string) []byte {
		sum := sha256.Sum256([]byte(path))
		return bytes.Repeat(sum[:], 64+int(sum[0])*4)
	}
	ln, err := net.Listen("tcp", "127.0.180.100:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(body(r.URL.Path))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return fmt.Sprintf("%s.%d.%s", ap.Addr(), ap.Port(), zone), body
}

// TestKeyRotationUnderLoad: six proxies rotate the network key in three
// steps (install the new key as accepted, make it primary, remove the
// old one), each step a `caddy reload` of every node in turn, while
// clients fetch through every proxy: no client request fails, no DSHT get
// fails, no datagram is refused for its key, and no node restarts. Then
// one node is reloaded with only the old key: the others drop what it
// sends and count it under key="none". Addresses 127.0.180.1–.6 and .100.
func TestKeyRotationUnderLoad(t *testing.T) {
	bin := caddyBinary(t)
	dir := t.TempDir()
	oldKey, newKey := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	fp := map[string]string{}
	for _, k := range []string{oldKey, newKey} {
		if err := coraldht.WriteKeyFile(k); err != nil {
			t.Fatal(err)
		}
		key, err := coraldht.LoadKeyFile(k)
		if err != nil {
			t.Fatal(err)
		}
		fp[k] = key.Fingerprint()
	}
	var ips []netip.Addr
	for i := 1; i <= 6; i++ {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 0, 180, byte(i)}))
	}
	ps := startNetwork(t, ips, proxyOptions{keys: []string{oldKey}})
	host, body := keyringOrigin(t)
	started := map[string]time.Time{}
	before := map[string]keyringStatus{}
	for _, p := range ps {
		st := p.keyringStatus(t)
		started[p.name], before[p.name] = st.Node.Started, st
	}

	reload := func(p *proxy, keys ...string) {
		t.Helper()
		cfg := caddyfile(p.dir, p.ip, ips[0], proxyOptions{keys: keys})
		if p.ip == ips[0] {
			cfg = caddyfile(p.dir, p.ip, netip.Addr{}, proxyOptions{keys: keys})
		}
		path := filepath.Join(p.dir, "Caddyfile")
		if err := labconf.WriteFile(path, cfg); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "reload", "--config", path, "--adapter", "caddyfile",
			"--address", netip.AddrPortFrom(p.ip, adminPort).String()).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: caddy reload: %v\n%s", p.name, err, out)
		}
		var want []string
		for _, k := range keys {
			want = append(want, fp[k])
		}
		if got := p.keyringStatus(t).fingerprints(); !slices.Equal(got, want) {
			t.Fatalf("%s after the reload: keys %v; want %v", p.name, got, want)
		}
	}

	// The load: 8 clients, each fetching through a random proxy, half of
	// the time one of 40 shared objects (hits and peer fetches), half a
	// new one (a DSHT put+get and an origin fetch). A request fails if it
	// fails twice or its answer is not the origin's 200 and body.
	c := newClient(t)
	var requests, failures, retried, fresh atomic.Int64
	var failMu sync.Mutex
	var failed []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/obj/shared-%d", rng.IntN(40))
				if rng.IntN(2) == 0 {
					path = fmt.Sprintf("/obj/new-%d", fresh.Add(1))
				}
				p := ps[rng.IntN(len(ps))]
				resp, b, err := fetch(c, p, host, path)
				if err != nil {
					// A connection closed under the request (EOF, reset)
					// is Caddy's reload replacing its HTTP server, not the
					// DSHT: a client retries it, as browsers do. Counted.
					retried.Add(1)
					resp, b, err = fetch(c, p, host, path)
				}
				requests.Add(1)
				if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Equal(b, body(path))) {
					err = fmt.Errorf("status %d, %d bytes (want 200, %d bytes)", resp.StatusCode, len(b), len(body(path)))
				}
				if err != nil {
					failures.Add(1)
					failMu.Lock()
					failed = append(failed, fmt.Sprintf("%s %s: %v", p.name, path, err))
					failMu.Unlock()
				}
			}
		})
	}
	pause := func() { time.Sleep(time.Second) }
	pause()
	t0 := time.Now()
	for step, keys := range [][]string{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		for _, p := range ps {
			reload(p, keys...)
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("step %d done on every node after %v, %d requests so far", step+1, time.Since(t0).Round(time.Millisecond), requests.Load())
		pause()
	}
	close(stop)
	wg.Wait()

	var gets, hits, getFailures, putGets, putFailures, badKey, timeouts, underNew uint64
	drops := map[string]uint64{}
	for _, p := range ps {
		st, was := p.keyringStatus(t), before[p.name]
		if !st.Node.Started.Equal(started[p.name]) {
			t.Errorf("%s restarted during the rotation (started %v, was %v)", p.name, st.Node.Started, started[p.name])
		}
		gets += st.DHT.Gets - was.DHT.Gets
		hits += st.DHT.GetHits - was.DHT.GetHits
		getFailures += st.DHT.GetFailures - was.DHT.GetFailures
		putGets += st.DHT.PutGets - was.DHT.PutGets
		putFailures += st.DHT.PutFailures - was.DHT.PutFailures
		badKey += st.DHT.DropsBy["bad_auth"]
		for r, n := range st.DHT.DropsBy {
			drops[r] += n - was.DHT.DropsBy[r]
		}
		timeouts += st.DHT.Timeouts - was.DHT.Timeouts
		underNew += st.DHT.NetworkKeys[0].Accepted
	}
	t.Logf("rotation under load: %d client requests (%d failed; %d connection errors retried once); DSHT put+gets %d (%d failed), gets %d (%d found values, %d failed); RPC timeouts %d; drops by reason %v; datagrams refused for their key %d, accepted under the new key %d",
		requests.Load(), failures.Load(), retried.Load(), putGets, putFailures, gets, hits, getFailures, timeouts, drops, badKey, underNew)
	if failures.Load() != 0 {
		t.Errorf("%d of %d client requests failed during the rotation; first: %s", failures.Load(), requests.Load(), failed[0])
	}
	if requests.Load() < 200 || putGets < 100 || underNew == 0 {
		t.Errorf("too little load to tell: %d requests, %d DSHT put+gets, %d datagrams under the new key", requests.Load(), putGets, underNew)
	}
	if getFailures+putFailures != 0 || badKey != 0 {
		t.Errorf("during the rotation %d DSHT gets and %d put+gets failed and %d datagrams were refused for their key; want 0, 0 and 0", getFailures, putFailures, badKey)
	}

	// The admin API changes a running node's keyring too: install the old
	// key again on the first node from the request body, then remove it.
	adminKeys := func(p *proxy, method, path string, body []byte) []string {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+netip.AddrPortFrom(p.ip, adminPort).String()+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = fmt.Sprintf("localhost:%d", adminPort)
		resp, err := adminClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Keys []struct {
				Fingerprint string `json:"fingerprint"`
			} `json:"keys"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s, %v", method, path, resp.Status, err)
		}
		var out []string
		for _, k := range doc.Keys {
			out = append(out, k.Fingerprint)
		}
		return out
	}
	oldText, err := os.ReadFile(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := adminKeys(ps[0], http.MethodPost, "/coral/keys/install", oldText); !slices.Equal(got, []string{fp[newKey], fp[oldKey]}) {
		t.Fatalf("after POST /coral/keys/install: keys %v", got)
	}
	if got := adminKeys(ps[0], http.MethodPost, "/coral/keys/remove?fingerprint="+fp[oldKey][:8], nil); !slices.Equal(got, []string{fp[newKey]}) {
		t.Fatalf("after POST /coral/keys/remove: keys %v", got)
	}
	if got := adminKeys(ps[0], http.MethodGet, "/coral/keys", nil); !slices.Equal(got, []string{fp[newKey]}) {
		t.Fatalf("GET /coral/keys: %v", got)
	}

	// A node reloaded with only the old key (it missed the rotation) is cut
	// off: the others count what it sends under key="none".
	stale, others := ps[len(ps)-1], ps[:len(ps)-1]
	reload(stale, oldKey)
	for i := range 5 {
		_, _, _ = fetch(c, stale, host, fmt.Sprintf("/obj/stale-%d", i))
	}
	waitFor(t, "the stale node's datagrams counted as bad keys", 30*time.Second, ps, func() error {
		var none uint64
		for _, p := range others {
			none += metricValue(p.metrics(t), `caddy_coral_dht_network_key_datagrams_total{key="none"`)
		}
		if none == 0 {
			return fmt.Errorf("no datagram counted under key=\"none\" at the other nodes")
		}
		st := stale.keyringStatus(t)
		t.Logf("the node left with only the old key: %d of its datagrams dropped and counted under key=\"none\" at the others; its own failed put+gets since the start: %d",
			none, st.DHT.PutFailures-before[stale.name].DHT.PutFailures)
		return nil
	})
}

// metricValue sums the samples of /metrics text whose line starts with
// prefix (a metric name and the start of its labels).
func metricValue(metrics, prefix string) uint64 {
	var sum uint64
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += uint64(v)
		}
	}
	return sum
}
