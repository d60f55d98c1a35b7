package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// slowBigOrigin serves 1 MiB objects: first bytes at once, the rest when
// release is closed. gone gets a value for every request the proxy gave
// up on (its context ended before release).
type slowBigOrigin struct {
	*recordingOrigin
	release chan struct{}
	gone    chan string
}

const slowBigSize = 1 << 20

func newSlowBigOrigin(t *testing.T) *slowBigOrigin {
	o := &slowBigOrigin{release: make(chan struct{}), gone: make(chan string, 100)}
	o.recordingOrigin = newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		first := slowBigSize / 100
		if f, err := strconv.Atoi(r.URL.Query().Get("first")); err == nil {
			first = f
		}
		w.Header().Set("Content-Length", strconv.Itoa(slowBigSize))
		w.Header().Set("Cache-Control", "max-age=600")
		if r.URL.Query().Has("nostore") {
			w.Header().Set("Cache-Control", "no-store") // relayed uncached
		}
		w.Write(make([]byte, first))
		w.(http.Flusher).Flush()
		select {
		case <-o.release:
			w.Write(make([]byte, slowBigSize-first))
		case <-r.Context().Done():
			o.gone <- r.URL.RequestURI()
		}
	})
	// Before the origin's own Close, which waits for its handlers.
	t.Cleanup(func() { o.open() })
	return o
}

func (o *slowBigOrigin) open() {
	select {
	case <-o.release:
	default:
		close(o.release)
	}
}

// openFrom sends a GET for path through p from the local address from
// and returns once the response header is in; cancel abandons it.
func (p *localProxy) openFrom(t *testing.T, from, host, path string, hdr ...string) (resp *http.Response, cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err = c.Do(req)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return resp, func() { stop(); resp.Body.Close() }
}

// waitGone waits for the origin to see n requests given up.
func (o *slowBigOrigin) waitGone(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for i := range n {
		select {
		case <-o.gone:
		case <-deadline.C:
			t.Fatalf("after %s the proxy had given up %d of the %d downloads no client waits for", within, i, n)
		}
	}
}

// TestAbandonedDownloadsCancelled: downloads whose clients left are
// cancelled, and their slots serve the next client. Clients that abandon
// requests for distinct URLs of a big, slow object used to hold every
// slot of the origin for download_timeout; the next user got 503.
func TestAbandonedDownloadsCancelled(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
		c.MaxDownloadsPerOrigin, c.MaxDownloadsPerClient = 4, 4
		c.DownloadWait = 3 * time.Second
	})
	for i := range 4 {
		resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?i="+strconv.Itoa(i))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	o.waitGone(t, 4, 10*time.Second)
	resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?next")
	defer cancel()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the next client: %d, want 200", resp.StatusCode)
	}
	if _, ok := p.store.Get(coralname.CacheKey("http", "127.0.0.1", o.port(), "/big", "i=0")); ok {
		t.Error("an abandoned download is in the cache")
	}
}

// TestAbandonedRelayCancelled: a response relayed uncached whose client
// leaves while the origin is slow gives up its origin fetch (and with it
// its download slot) at once. The relay used to notice only at its next
// write to the client, so it held both until the origin sent more or
// went idle for origin_timeout + peer_timeout; a test's origin waiting
// for the test to end blocked in Close meanwhile (it showed as
// "httptest.Server blocked in Close" in TestDownloadSlotsPerClientDefaultFitsAPage).
func TestAbandonedRelayCancelled(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
		c.OriginTimeout = time.Minute // the origin's silence is not what ends the fetch
	})
	resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?nostore")
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Cache-Status"), "stored=false") {
		t.Fatalf("no-store object: %d, Cache-Status %q; want 200 relayed uncached", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	o.waitGone(t, 1, 10*time.Second)
}

// TestServeDirectWithoutCancel: a response relayed with no fetch of its
// own to cancel (an error shared among a download's joiners, a
// revalidation's) is relayed whether or not its client is still there.
// With the client gone, the relay's cancel-on-leave ran a nil function
// ("fatal error: go of nil func value", once in a stress run of the
// package, in TestRFCStale's 503).
func TestServeDirectWithoutCancel(t *testing.T) {
	px := bareProxy(t)
	ctx, leave := context.WithCancel(context.Background())
	leave()
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1.8080.nyud.test/x", nil).WithContext(ctx)
	resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, ContentLength: 4, Body: io.NopCloser(strings.NewReader("busy"))}
	w := httptest.NewRecorder()
	if err := px.serveDirect(w, r, resp, "origin", nil, nil); err != nil || w.Code != http.StatusServiceUnavailable || w.Body.String() != "busy" {
		t.Errorf("relayed: %d %q, %v; want 503 \"busy\"", w.Code, w.Body.String(), err)
	}
}

func (o *recordingOrigin) port() int {
	ap, _ := net.ResolveTCPAddr("tcp", o.hostPort())
	return ap.Port
}

// TestNearlyDoneAndPeerHeldDownloadsFinish: a download that is nearly
// done when its client leaves, or that a peer is still streaming, is
// finished and cached.
func TestNearlyDoneAndPeerHeldDownloadsFinish(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 0, nil)
	host := o.coralHost()
	// Nearly done: 95% arrived.
	resp, cancel := p.openFrom(t, "127.0.0.1", host, "/big?first="+strconv.Itoa(slowBigSize*95/100))
	if _, err := io.ReadFull(resp.Body, make([]byte, slowBigSize*95/100)); err != nil {
		t.Fatal(err)
	}
	nearly := p.px.inflightFor(coralname.CacheKey("http", "127.0.0.1", o.port(), "/big", "first="+strconv.Itoa(slowBigSize*95/100)))
	if nearly == nil {
		t.Fatal("no download running")
	}
	cancel()
	// A peer (only-if-cached) joins a download its client then leaves.
	resp, cancelClient := p.openFrom(t, "127.0.0.1", host, "/big?peer")
	resp.Body.Read(make([]byte, 100))
	peer, cancelPeer := p.openFrom(t, "127.0.0.2", host, "/big?peer", "Cache-Control", "only-if-cached")
	defer cancelPeer()
	if peer.StatusCode != http.StatusOK {
		t.Fatalf("peer: %d", peer.StatusCode)
	}
	peerHeld := p.px.inflightFor(coralname.CacheKey("http", "127.0.0.1", o.port(), "/big", "peer"))
	cancelClient()
	waitHolders(t, p.px, nearly, 0)
	waitHolders(t, p.px, peerHeld, 1)
	o.open()
	n, err := io.Copy(io.Discard, peer.Body)
	if err != nil || n != slowBigSize {
		t.Errorf("the peer got %d bytes (%v), want %d", n, err, slowBigSize)
	}
	<-nearly.done
	<-peerHeld.done
	for _, q := range []string{"first=" + strconv.Itoa(slowBigSize*95/100), "peer"} {
		rd, ok := p.store.Get(coralname.CacheKey("http", "127.0.0.1", o.port(), "/big", q))
		if !ok || !rd.Complete() {
			t.Errorf("?%s is not cached whole", q)
		}
		if ok {
			rd.Close()
		}
	}
	select {
	case u := <-o.gone:
		t.Errorf("%s was given up", u)
	default:
	}
}

// waitHolders waits until d is held by n requests: the handler lets go
// when it sees its client gone, which the test cannot wait for otherwise.
func waitHolders(t *testing.T, px *Proxy, d *download, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		px.mu.Lock()
		h := d.holders
		px.mu.Unlock()
		if h == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("download held by %d, want %d", h, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDownloadSlotsPerClient: one client address holds at most
// max_downloads_per_client of an origin's slots; another address gets
// one meanwhile.
func TestDownloadSlotsPerClient(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
		c.MaxDownloadsPerClient = 2
		c.DownloadWait = 300 * time.Millisecond
	})
	for i := range 2 {
		resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?c="+strconv.Itoa(i))
		defer cancel()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?c=third")
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a third download for one client: %d, want 503", resp.StatusCode)
	}
	resp, cancel = p.openFrom(t, "127.0.0.2", o.coralHost(), "/big?other")
	cancel()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another client: %d, want 200", resp.StatusCode)
	}
	s := testSlots(10, 10, 1)
	take := func(origin, client string) error {
		_, err := s.acquire(context.Background(), origin, client, 0)
		return err
	}
	if take("o", "a") != nil || take("o", "a") == nil || take("p", "a") != nil || take("o", "") != nil {
		t.Error("per client: one slot per client and origin, none counted for no client")
	}
}

// TestDownloadSlotsPerClientDefaultFitsAPage: with the defaults, one
// client address (a NAT's users, or eval/flashcrowd's start burst) may
// fetch a page's dozen objects of one origin at once. With a default of 8
// the ninth to twelfth waited download_wait and got 503.
func TestDownloadSlotsPerClientDefaultFitsAPage(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
		c.DownloadWait = 300 * time.Millisecond
	})
	for i := range 12 {
		resp, cancel := p.openFrom(t, "127.0.0.1", o.coralHost(), "/big?page="+strconv.Itoa(i))
		defer cancel()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("object %d of a page, all from one address: %d", i, resp.StatusCode)
		}
	}
}

// stallingClient sends a GET for path to p from the local address from,
// with a small receive buffer, and never reads: the proxy's writes to it
// block once the socket buffers are full. It returns the connection.
func (p *localProxy) stallingClient(t *testing.T, from, host, path string) net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", p.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStalledRelayGivesUpItsSlot: a response relayed uncached (no-store
// here; in eval/hostile, the cache refusing a version because readers
// held its room) holds its download slot until its client has it all. A
// client that never read used to keep that slot until write_idle_timeout,
// so the origin's other objects waited download_wait and got 503 (an
// eval/hostile canary timed out). Now a request that finds no slot free
// takes over the slot of a relay whose client has read nothing for
// relayStall, and that relay is cut; a relay waiting on its origin, not
// its client, keeps its slot.
func TestStalledRelayGivesUpItsSlot(t *testing.T) {
	const bigSize = 32 << 20 // far beyond what socket buffers take
	for _, tc := range []struct {
		name      string
		configure func(*Config)
		second    string // the address of the request that needs the slot
	}{
		{"per origin", func(c *Config) { c.MaxDownloadsPerOrigin = 1 }, "127.0.0.2"},
		{"per client", func(c *Config) { c.MaxDownloadsPerClient = 1 }, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trickle := make(chan struct{})
			bigStarted := make(chan struct{}, 10)
			bigGone := make(chan struct{}, 10)
			o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-store")
				switch r.URL.Path {
				case "/big":
					bigStarted <- struct{}{}
					w.Header().Set("Content-Length", strconv.Itoa(bigSize))
					chunk := make([]byte, 64<<10)
					for n := 0; n < bigSize; n += len(chunk) {
						if _, err := w.Write(chunk); err != nil {
							bigGone <- struct{}{}
							return
						}
					}
				case "/trickle": // a slow origin, not a slow client
					w.Write([]byte("x"))
					w.(http.Flusher).Flush()
					select {
					case <-trickle:
					case <-r.Context().Done():
					}
				default:
					w.Write([]byte("small"))
				}
			})
			const wait = 4 * relayStall
			p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
				tc.configure(c)
				c.DownloadWait = wait
			})
			t.Cleanup(func() { close(trickle) }) // before the proxy's and origin's Close
			stalled := p.stallingClient(t, "127.0.0.1", o.coralHost(), "/big")
			// The big download must hold its slot before the second request
			// asks for one; otherwise the second may simply get there first.
			select {
			case <-bigStarted:
			case <-time.After(10 * time.Second):
				t.Fatal("the origin never got the stalled client's request")
			}
			start := time.Now()
			resp, cancel := p.openFrom(t, tc.second, o.coralHost(), "/small")
			body, _ := io.ReadAll(resp.Body)
			cancel()
			if resp.StatusCode != http.StatusOK || string(body) != "small" {
				t.Fatalf("another object of the origin while a client that never reads holds its slot: %d %q after %s, want 200 \"small\"",
					resp.StatusCode, body, time.Since(start).Round(time.Millisecond))
			}
			if took := time.Since(start); took > wait/2 {
				t.Errorf("served after %s, want about relayStall (%s)", took, relayStall)
			}
			// The stalled relay was cut, its origin fetch with it. (Its
			// client's connection is closed too, but with a 4 KiB receive
			// buffer on loopback the rest of what the kernel holds trickles
			// out at zero-window probes, so the test does not wait for it.)
			select {
			case <-bigGone:
			case <-time.After(5 * time.Second):
				t.Error("the stalled relay's origin fetch still runs 5 s after its slot was taken over")
			}
			stalled.Close()

			// A relay that waits on its origin keeps its slot.
			slow, cancelSlow := p.openFrom(t, "127.0.0.1", o.coralHost(), "/trickle")
			defer cancelSlow()
			if slow.StatusCode != http.StatusOK {
				t.Fatalf("trickle: %d", slow.StatusCode)
			}
			if _, err := io.ReadFull(slow.Body, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			resp, cancel = p.openFrom(t, tc.second, o.coralHost(), "/small")
			cancel()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("while a relay is reading its (slow) origin: %d, want 503 after download_wait", resp.StatusCode)
			}
		})
	}
}

// TestStalledRelaySlotChoice: a request takes over only a relay counted
// in every bound that stops it, only once its client has been stalled for
// relayStall, and the slot changes hands without any bound going over.
func TestStalledRelaySlotChoice(t *testing.T) {
	stalledFor := func(r *relaySlot, d time.Duration) { r.writing.Store(time.Now().Add(-d).UnixNano()) }
	serve := func(s *downloadSlots, origin, client string) (*relaySlot, *bool) {
		t.Helper()
		h, err := s.acquire(context.Background(), origin, client, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := s.relay(h)
		cut := new(bool)
		r.serving(func() { *cut = true })
		return r, cut
	}
	ctx := context.Background()

	// Per origin: a stalled relay of another origin does not help.
	s := testSlots(10, 1, 10)
	other, otherCut := serve(s, "p", "a")
	stalledFor(other, time.Minute)
	mine, mineCut := serve(s, "o", "a")
	if _, err := s.acquire(ctx, "o", "b", 0); err == nil || *otherCut {
		t.Fatalf("per origin: took a slot (%v) or cut another origin's relay (%v)", err == nil, *otherCut)
	}
	stalledFor(mine, relayStall/2)
	if _, err := s.acquire(ctx, "o", "b", 0); err == nil || *mineCut {
		t.Fatal("per origin: took over a relay stalled for less than relayStall")
	}
	stalledFor(mine, relayStall)
	if _, err := s.acquire(ctx, "o", "b", 0); err != nil || !*mineCut || !mine.preempted() {
		t.Fatalf("per origin: %v, cut %v: want the stalled relay's slot", err, *mineCut)
	}
	if all, o := s.inUse("o"); all != 2 || o != 1 {
		t.Errorf("after the take-over: %d in all, %d for the origin; want 2 and 1", all, o)
	}
	mine.end() // the cut relay ends: nothing more to give back
	if all, o := s.inUse("o"); all != 2 || o != 1 {
		t.Errorf("after the cut relay ended: %d in all, %d for the origin; want 2 and 1", all, o)
	}

	// Per client: only a relay of the same client and origin.
	s = testSlots(10, 10, 1)
	b, bCut := serve(s, "o", "b")
	stalledFor(b, time.Minute)
	a, aCut := serve(s, "o", "a")
	stalledFor(a, time.Minute)
	if _, err := s.acquire(ctx, "o", "a", 0); err != nil || !*aCut || *bCut {
		t.Errorf("per client: %v, own relay cut %v, other client's cut %v", err, *aCut, *bCut)
	}

	// Total: any stalled relay, and a relay not yet serving never.
	s = testSlots(1, 10, 10)
	h, err := s.acquire(ctx, "p", "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	idle := s.relay(h) // handed to its requester, not serving yet
	if _, err := s.acquire(ctx, "o", "a", 0); err == nil {
		t.Error("total: took the slot of a relay not serving yet")
	}
	idle.end()
	r, rCut := serve(s, "p", "c")
	stalledFor(r, time.Minute)
	if _, err := s.acquire(ctx, "o", "a", 0); err != nil || !*rCut {
		t.Errorf("total: %v, cut %v", err, *rCut)
	}
}

// testSlots is downloadSlots with the given bounds on all downloads, per
// origin and per client and origin, and none per address or per client
// over all origins.
func testSlots(total, perOrigin, perClient int) *downloadSlots {
	return newDownloadSlots(slotBounds{total: total, perOrigin: perOrigin, perAddress: total, perClient: perClient, perClientAll: total})
}
