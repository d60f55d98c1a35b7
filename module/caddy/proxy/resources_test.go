package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// resourceRow is one row of the node's resource table (module/caddy
// README, "What one client can make the node hold"): the cells as the
// README writes them, and a test that the bounds hold.
type resourceRow struct {
	cells    [5]string
	exercise func(t *testing.T)
}

// resourceTable is the table in code, from the defaults: the README is
// checked against it, and each row is exercised.
func resourceTable() []resourceRow {
	c := DefaultConfig()
	b := slotBoundsOf(&c)
	perOrigin := fmt.Sprintf("%d per name, %d per address", b.perOrigin, b.perAddress)
	return []resourceRow{
		{[5]string{
			"Download slots: fetches that fill the cache, from a peer or the origin (revalidations too)",
			fmt.Sprintf("%d (`max_downloads`)", b.total),
			fmt.Sprintf("%d per name and port (`max_downloads` 2nd), %d per address (`max_address_downloads`)", b.perOrigin, b.perAddress),
			fmt.Sprintf("%d per origin (`max_downloads` 3rd), %d over all origins (`max_client_downloads`)", b.perClient, b.perClientAll),
			fmt.Sprintf("the download ends or fails; its last holder goes (unless %d %% is in); `download_timeout` (%s)", nearlyDonePercent, shortDuration(c.DownloadTimeout)),
		}, exerciseDownloadSlots},
		{[5]string{
			"Relay slots: uncached responses relayed at the client's pace",
			fmt.Sprintf("download slots: the same %d", b.total),
			fmt.Sprintf("the same %d and %d", b.perOrigin, b.perAddress),
			fmt.Sprintf("the same %d and %d", b.perClient, b.perClientAll),
			fmt.Sprintf("the client has it all; it stalls %s while a request waits for a slot; `write_idle_timeout` (30s)", shortDuration(relayStall)),
		}, exerciseRelaySlots},
		{[5]string{
			"Origin connections in use",
			fmt.Sprintf("one per download or relay slot: %d", b.total),
			perOrigin,
			fmt.Sprint(b.perClientAll),
			"with the slot (idle ones after 90s, at most 256 idle and 8 per name)",
		}, exerciseOriginConnections},
		{[5]string{
			"Peer fetches",
			fmt.Sprintf("one at a time per download slot: %d", b.total),
			perOrigin,
			fmt.Sprint(b.perClientAll),
			fmt.Sprintf("with the slot; `peer_timeout` (%s) per silence", shortDuration(c.PeerTimeout)),
		}, exercisePeerFetches},
		{[5]string{
			"Requests waiting for a download slot",
			"the clients' bounds",
			"none of its own",
			fmt.Sprintf("%d (`max_client_downloads`); beyond that 503 at once", b.perClientAll),
			fmt.Sprintf("a slot frees; `download_wait` (%s), then 503", shortDuration(c.DownloadWait)),
		}, exerciseWaiting},
		{[5]string{
			"Download bytes in flight, written to disk",
			"`cache_size`, charged as they arrive",
			"`max_object_size` per download",
			fmt.Sprintf("1/%d of `cache_size` over all origins, at least `max_object_size`", clientShareDivisor),
			"the download ends (kept or dropped)",
		}, exerciseBytesInFlight},
	}
}

// shortDuration writes d as the README does: 10m, 30s, 2s.
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "m0s") + map[bool]string{true: "m"}[strings.HasSuffix(s, "m0s")]
	return strings.TrimSuffix(s, "h0m") + map[bool]string{true: "h"}[strings.HasSuffix(s, "h0m")]
}

// TestResourceTable walks the node's resource table: the README has
// exactly the rows of resourceTable, cell for cell, and each row's bounds
// hold.
func TestResourceTable(t *testing.T) {
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- resource table"):
			in = true
		case in && strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if cells[0] != "Resource" && !strings.HasPrefix(cells[0], "---") {
				rows = append(rows, cells)
			}
		case in:
			in = len(rows) == 0
		}
	}
	table := resourceTable()
	if len(rows) != len(table) {
		t.Fatalf("the README's resource table has %d rows, the code's %d", len(rows), len(table))
	}
	for i, r := range table {
		if got := strings.Join(rows[i], " | "); got != strings.Join(r.cells[:], " | ") {
			t.Errorf("README row %d:\n got  %s\n want %s", i+1, got, strings.Join(r.cells[:], " | "))
		}
	}
	for _, r := range table {
		t.Run(strings.Fields(r.cells[0])[0]+"_"+strings.Fields(r.cells[0])[1], r.exercise)
	}
}

// exerciseDownloadSlots: with the default bounds, one client fills its
// share over many origins and no more; a name's and an address's bounds
// hold across clients; the total holds across clients.
func exerciseDownloadSlots(t *testing.T) {
	c := DefaultConfig()
	b := slotBoundsOf(&c)
	s := newDownloadSlots(b)
	ctx := context.Background()
	take := func(origin, client string) *slotHold {
		h, err := s.acquire(ctx, origin, client, 0)
		if err != nil {
			return nil
		}
		return h
	}
	for i := range b.perClientAll {
		if take(fmt.Sprintf("o%d.wild.test:80", i), "192.0.2.1/32") == nil {
			t.Fatalf("client refused its slot %d of %d", i+1, b.perClientAll)
		}
	}
	if take("another.wild.test:80", "192.0.2.1/32") != nil {
		t.Errorf("a client took a slot beyond its %d over all origins", b.perClientAll)
	}
	for i := range b.perClient {
		if take("one.test:80", fmt.Sprintf("198.51.100.%d/32", i/b.perClient)) == nil {
			t.Fatal("per client and origin: refused within the bound")
		}
	}
	if take("one.test:80", "198.51.100.0/32") != nil {
		t.Errorf("a client took more than %d slots of one origin", b.perClient)
	}
	// One origin address, whatever the names: perAddress, across clients.
	addr := netip.MustParseAddr("203.0.113.7")
	bound := 0
	for i := range b.perAddress + 8 {
		h := take(fmt.Sprintf("n%d.wild2.test:%d", i, 8000+i), fmt.Sprintf("2001:db8:%x::/48", i))
		if h == nil {
			t.Fatal("refused a slot for a fresh name and client")
		}
		if s.bindAddr(ctx, h, addr, time.Millisecond) == nil {
			bound++
		} else {
			s.release(h)
		}
	}
	if bound != b.perAddress {
		t.Errorf("downloads from one origin address: %d, want %d", bound, b.perAddress)
	}
	// The total, across clients.
	for i := 0; ; i++ {
		if take(fmt.Sprintf("t%d.test:80", i), fmt.Sprintf("10.%d.%d.1/32", i/256, i%256)) == nil {
			break
		}
	}
	if all, _ := s.inUse(""); all != b.total {
		t.Errorf("%d slots taken at most, want %d", all, b.total)
	}
}

// exerciseRelaySlots: relays are download slots: a client's stalled
// relays are taken over by its own next request, never added to.
func exerciseRelaySlots(t *testing.T) {
	c := DefaultConfig()
	b := slotBoundsOf(&c)
	s := newDownloadSlots(b)
	ctx := context.Background()
	var relays []*relaySlot
	for i := range b.perClientAll {
		h, err := s.acquire(ctx, fmt.Sprintf("o%d.test:80", i), "192.0.2.1/32", 0)
		if err != nil {
			t.Fatal(err)
		}
		r := s.relay(h)
		r.serving(func() {})
		relays = append(relays, r)
	}
	if _, err := s.acquire(ctx, "x.test:80", "192.0.2.1/32", 0); err == nil {
		t.Fatal("a relay did not count in the client's bound")
	}
	relays[0].writing.Store(time.Now().Add(-relayStall).UnixNano())
	if _, err := s.acquire(ctx, "x.test:80", "192.0.2.1/32", 0); err != nil || !relays[0].preempted() {
		t.Errorf("a stalled relay of the client's was not taken over: %v", err)
	}
	if n := s.counts("192.0.2.1/32", netip.Addr{}).client; n != b.perClientAll {
		t.Errorf("after the take-over the client holds %d, want %d", n, b.perClientAll)
	}
}

// exerciseOriginConnections: one client asking for 64 slow URLs of
// wildcard names on one origin holds at most its share of origin
// connections; the store's downloads in progress are as many.
func exerciseOriginConnections(t *testing.T) {
	origins := []*slowBigOrigin{newSlowBigOrigin(t), newSlowBigOrigin(t)}
	p := startLocalProxy(t, 1<<30, func(c *Config, so *diskcache.Options) { c.DownloadWait = time.Second })
	wildcardOrigins(p)
	ok, _ := manyOriginsAttack(t, p, "127.0.0.2", origins, 40)
	seen := len(origins[0].requests()) + len(origins[1].requests())
	if b := p.px.slots.b; ok > b.perClientAll || seen > b.perClientAll {
		t.Errorf("one client: %d served, %d origin requests; want at most %d", ok, seen, b.perClientAll)
	}
	if w := p.store.Stats().Writing; w > p.px.slots.b.perClientAll {
		t.Errorf("%d downloads writing to the cache for one client", w)
	}
}

// heldDHT is a DSHT node whose put+gets wait until released: a download
// in its put+get holds its slot, as one waiting on a peer does.
type heldDHT struct {
	release      chan struct{}
	now, maxSeen atomic.Int64
}

func (h *heldDHT) Addr() netip.AddrPort { return netip.MustParseAddrPort("127.0.0.1:1") }
func (h *heldDHT) Put(context.Context, coraldht.ID, []byte, time.Duration, ...int) (coraldht.PutResult, error) {
	return coraldht.PutResult{}, nil
}
func (h *heldDHT) PutGet(ctx context.Context, _ coraldht.ID, _ []byte, _ time.Duration, _ ...int) (coraldht.PutGetResult, error) {
	n := h.now.Add(1)
	defer h.now.Add(-1)
	for m := h.maxSeen.Load(); n > m && !h.maxSeen.CompareAndSwap(m, n); m = h.maxSeen.Load() {
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return coraldht.PutGetResult{Level: -1}, ctx.Err()
}

// exercisePeerFetches: the DSHT lookups and peer fetches of one client's
// downloads happen inside its download slots: however many URLs it asks
// for, at most its share are under way.
func exercisePeerFetches(t *testing.T) {
	dht := &heldDHT{release: make(chan struct{})}
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) {
		c.DownloadWait = 500 * time.Millisecond
		c.Node = func() DHT { return dht }
		c.PeerAddress = netip.MustParseAddrPort("127.0.0.1:1")
	})
	o := newSlowBigOrigin(t)
	wildcardOrigins(p)
	port := netip.MustParseAddrPort(o.hostPort()).Port()
	var wg sync.WaitGroup
	var refused atomic.Int64
	want := 48
	for i := range want {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.srv.URL+fmt.Sprintf("/peer%d", i), nil)
			req.Host = fmt.Sprintf("o%d.wild.test.%d.nyud.test", i%4, port) // four origins: over the bound per origin
			if resp, err := http.DefaultClient.Do(req); err == nil {
				if resp.StatusCode == http.StatusServiceUnavailable {
					refused.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	b := p.px.slots.b
	for deadline := time.Now().Add(15 * time.Second); refused.Load() < int64(want-b.perClientAll) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if m := dht.maxSeen.Load(); m > int64(b.perClientAll) || refused.Load() != int64(want-b.perClientAll) {
		t.Errorf("one client's %d requests: %d lookups at once, %d refused; want at most %d at once and %d refused",
			want, m, refused.Load(), b.perClientAll, want-b.perClientAll)
	}
	close(dht.release)
	wg.Wait()
}

// exerciseWaiting: a client may have as many requests waiting for a slot
// as it may hold slots; the next is refused at once.
func exerciseWaiting(t *testing.T) {
	s := newDownloadSlots(slotBounds{total: 1, perOrigin: 1, perAddress: 1, perClient: 1, perClientAll: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.acquire(ctx, "o", "other", 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _, _ = s.acquire(ctx, "o", "c", time.Minute) })
	}
	for s.counts("c", netip.Addr{}).waiting < 3 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := s.acquire(ctx, "o", "c", time.Minute); err == nil || time.Since(start) > 30*time.Second {
		t.Errorf("a fourth waiting request: %v after %s, want refused at once", err, time.Since(start))
	}
	cancel()
	wg.Wait()
	if n := s.counts("c", netip.Addr{}).waiting; n != 0 {
		t.Errorf("%d still counted waiting after they left", n)
	}
}

// exerciseBytesInFlight: a download beyond max_object_size is cut off
// and not stored, so one download holds at most that much of the cache;
// one client's downloads together hold at most its share of the cache
// (exerciseClientBytes).
func exerciseBytesInFlight(t *testing.T) {
	t.Run("one client's share", exerciseClientBytes)
	o := newSlowBigOrigin(t)
	o.open()
	p := startLocalProxy(t, 4<<20, func(c *Config, so *diskcache.Options) { so.MaxObjectBytes = slowBigSize / 2 })
	resp, body := p.get(t, o.coralHost(), "/toolarge")
	_ = body
	p.idle(t)
	if st := p.store.Stats(); st.Entries != 0 || st.WritingBytes != 0 {
		t.Errorf("an object over max_object_size: %d, stored %d, writing %d bytes", resp.StatusCode, st.Entries, st.WritingBytes)
	}
}

// exerciseClientBytes: with a 16 MiB cache and max_object_size 1 MiB, a
// client's downloads may hold 2 MiB in flight (an eighth, at least one
// object). One client starts three slow 1 MiB downloads: the first two
// are cached, the third is relayed to it uncached; another client's
// download is cached beside them. Every client gets its whole body.
func exerciseClientBytes(t *testing.T) {
	o := newSlowBigOrigin(t)
	p := startLocalProxy(t, 16<<20, func(c *Config, so *diskcache.Options) { so.MaxObjectBytes = slowBigSize })
	if got, want := p.px.slots.b.perClientBytes, int64(2*slowBigSize); got != want {
		t.Fatalf("a client's share of a 16 MiB cache: %d bytes, want %d", got, want)
	}
	type open struct {
		from, path string
		resp       *http.Response
	}
	opens := []*open{{"127.0.0.5", "/one", nil}, {"127.0.0.5", "/two", nil}, {"127.0.0.5", "/three", nil}, {"127.0.0.6", "/other", nil}}
	for _, op := range opens {
		resp, cancel := p.openFrom(t, op.from, o.coralHost(), op.path)
		defer cancel()
		op.resp = resp
	}
	if n := p.px.slots.clientBytes("127.0.0.5/32"); n != 2*slowBigSize {
		t.Errorf("the client's downloads hold %d bytes in flight, want %d", n, 2*slowBigSize)
	}
	// A body of unknown length, while the share is spent: relayed
	// whole, not stored.
	chunked := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		for range 16 {
			w.Write(make([]byte, 4096))
			w.(http.Flusher).Flush()
		}
	})
	resp, cancel := p.openFrom(t, "127.0.0.5", chunked.coralHost(), "/chunked")
	body, err := io.ReadAll(resp.Body)
	cancel()
	if err != nil || len(body) != 16*4096 || resp.ContentLength >= 0 {
		t.Errorf("a body of unknown length past the client's share: %d bytes (Content-Length %d), %v", len(body), resp.ContentLength, err)
	}
	o.open()
	for _, op := range opens {
		body, err := io.ReadAll(op.resp.Body)
		op.resp.Body.Close()
		if err != nil || len(body) != slowBigSize {
			t.Errorf("%s from %s: %d bytes, %v", op.path, op.from, len(body), err)
		}
	}
	p.idle(t)
	if st := p.store.Stats(); st.Entries != 3 {
		t.Errorf("%d objects cached, want 3 (the client's first two and the other client's)", st.Entries)
	}
	if n := p.px.slots.clientBytes("127.0.0.5/32"); n != 0 {
		t.Errorf("%d bytes still charged to the client after its downloads ended", n)
	}
}
