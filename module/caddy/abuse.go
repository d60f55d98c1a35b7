package coralcaddy

// Protections against misuse of the proxy (DESIGN.md §4 "Safety", thesis
// §3.4.3), each optional and each cheap enough to run on every request:
//
//   - blacklist: origin domains the proxy refuses to serve (403), read from
//     a file and reloaded while the proxy runs. CoralCDN kept such a list
//     for sites that asked not to be served, notably those that
//     authenticate by IP address and would otherwise be open to anyone
//     through a proxy on a whitelisted network.
//   - rateLimiter: a token bucket per client address (429 with
//     Retry-After). Besides plain abuse it breaks the multi-hop redirect
//     loops that misconfigured sites create through Coral.
//   - bandwidthBudget: the bytes this proxy may serve per window. Over it,
//     clients are sent to the origin with a 302 whose URL carries
//     "coral-no-serve", so the site's own "redirect to Coral" rule does
//     not send them straight back.
//
// abuseControls bundles the three behind one call per request (admit) and
// wraps the response writer to count the bytes served (count):
//
//	if done, err := h.abuse.admit(w, r, origin, originURL); done {
//		return err
//	}
//	w = h.abuse.count(w)
//
// A nil *blacklist, *rateLimiter, *bandwidthBudget or *abuseControls is a
// valid value meaning "off": their methods then allow everything.

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// Defaults, each with its reason.
const (
	// defaultRate and defaultBurst: 10 requests a second per client, with
	// bursts of 50. A browser loading a page with all its images, scripts
	// and style sheets through Coral stays within the burst, and a network
	// of users behind one NAT address within the rate, while a client
	// caught in a redirect loop or a scraper hammering the proxy is slowed
	// at once. The rate limit is on unless configured off: CoralCDN
	// proxies always tracked clients' request rates.
	defaultRate  = 10
	defaultBurst = 50

	// peerRateFactor: requests with Cache-Control: only-if-cached (what
	// peer proxies send) are counted apart, at this multiple of the client
	// rate and burst. One proxy fetches for all its clients, so it asks a
	// peer far more often than a browser asks a proxy; and such requests
	// cannot make this proxy fetch anything, so a client that sends them
	// to dodge the limit gains only cached bytes, which the bandwidth
	// budget bounds.
	peerRateFactor = 10

	// defaultMaxClients bounds the clients the rate limiter tracks. At the
	// default rate a bucket is full again (and so forgettable without loss)
	// 5 s after its client's last request, so the table only has to hold
	// the clients of the last few seconds: 65536 entries cover more than
	// 13,000 new clients a second, in about 7 MB.
	defaultMaxClients = 1 << 16

	// defaultBlacklistPoll: how often the blacklist file is checked for
	// changes. A stat every 10 s costs nothing measurable, and an operator
	// who edits the list sees it applied about as soon as they look.
	// The blacklist itself is off unless a file is configured.
	defaultBlacklistPoll = 10 * time.Second

	// defaultBudgetWindow: the bandwidth budget, off by default (a proxy
	// should serve what it can unless its operator has a quota to keep),
	// counts per day when no window is given, because hosting quotas are
	// agreed per day or month, and a day bounds how long an exhausted
	// budget keeps the proxy redirecting.
	defaultBudgetWindow = 24 * time.Hour
)

// ---------------------------------------------------------------------
// Per-request entry point.

// abuseControls are the optional protections of one handler. Nil fields
// are off; a nil *abuseControls admits everything.
type abuseControls struct {
	blacklist *blacklist
	rate      *rateLimiter
	peerRate  *rateLimiter // for only-if-cached requests; see peerRateFactor
	budget    *bandwidthBudget
	now       func() time.Time // time.Now when nil; tests inject a clock
}

func (a *abuseControls) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// Refusal reasons, wrapped in the errors admit returns.
var (
	errBlacklisted = errors.New("its owner asked that it not be served through Coral")
	errRateLimited = errors.New("coral_proxy: too many requests from your address; slow down")
	errOverBudget  = errors.New("coral_proxy: this proxy has used up its bandwidth budget")
)

// admit decides whether a Coralized request may be served. origin is the
// origin host (from ParseCoralized) and originURL returns the absolute URL
// of the object at the origin, without coral-no-serve (called only for a
// refusal or a redirect, so a request that is admitted does not pay for
// building it). The checks run in this
// order, cheapest and most definitive first:
//
//  1. a blacklisted origin gets 403;
//  2. a client over its rate gets 429 with Retry-After (whole seconds);
//  3. over the bandwidth budget, the client is redirected (302, not
//     cacheable) to the origin URL with coral-no-serve added.
//
// A request with Cache-Control: only-if-cached (what peer proxies send)
// gets 504 instead for all three: a peer takes any other answer for the
// object itself and would hand a 403, a 429 or a redirect to the origin
// on to its own clients, while 504 makes it try the next peer or the
// origin, which is the right fallback in each case.
//
// When done is true the request has been answered or refused and
// ServeHTTP should return err: a caddyhttp.HandlerError for a refusal, nil
// after a redirect has been written. The client address is Caddy's
// client_ip (which honours trusted_proxies), else the connection's.
func (a *abuseControls) admit(w http.ResponseWriter, r *http.Request, origin string, originURL func() string) (done bool, err error) {
	if a == nil {
		return false, nil
	}
	now := a.clock()
	fromPeer := httpcache.ParseRequestCacheControl(r.Header).OnlyIfCached
	refuse := func(status int, detail string, err error) (bool, error) {
		if fromPeer {
			w.Header().Set("Cache-Status", fmt.Sprintf("coral; fwd=miss; detail=%q", detail))
			status = http.StatusGatewayTimeout
		}
		return true, caddyhttp.Error(status, err)
	}
	if a.blacklist.blocked(origin) {
		return refuse(http.StatusForbidden, "blacklisted", fmt.Errorf("coral_proxy: %s is on this proxy's blacklist: %w; fetch %s directly", origin, errBlacklisted, originURL()))
	}
	limiter := a.rate
	if fromPeer {
		limiter = a.peerRate
	}
	if ok, wait := limiter.allow(requestClientAddr(r), now); !ok {
		if !fromPeer {
			w.Header().Set("Retry-After", retryAfterSeconds(wait))
		}
		return refuse(http.StatusTooManyRequests, "rate-limited", errRateLimited)
	}
	if a.budget.exceeded(now) {
		if fromPeer {
			return refuse(http.StatusGatewayTimeout, "over-budget", errOverBudget)
		}
		loc, err := noServeRedirect(originURL())
		if err != nil {
			return true, caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("%w; and the origin URL %q: %v", errOverBudget, originURL(), err))
		}
		// The redirect lasts only as long as the budget is exhausted.
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, loc, http.StatusFound)
		return true, nil
	}
	return false, nil
}

// count returns w wrapped so that the body bytes written through it are
// added to the bandwidth budget (responses to peers included: they are
// this proxy's bandwidth too), or w itself when there is no budget.
// Header bytes are not counted.
func (a *abuseControls) count(w http.ResponseWriter) http.ResponseWriter {
	if a == nil || a.budget == nil {
		return w
	}
	return &countingWriter{ResponseWriter: w, budget: a.budget, now: a.clock}
}

// countingWriter counts body bytes into a bandwidth budget. It keeps
// ReadFrom (so sendfile still works through it, counted) and Flush, and
// unwraps for http.ResponseController.
type countingWriter struct {
	http.ResponseWriter
	budget *bandwidthBudget
	now    func() time.Time
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.budget.add(int64(n), c.now())
	return n, err
}

func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(c.ResponseWriter, r) // the wrapped writer's ReadFrom, if any
	c.budget.add(n, c.now())
	return n, err
}

func (c *countingWriter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// requestClientAddr is the client's address: Caddy's client_ip variable,
// which honours trusted_proxies, else the connection's remote address.
// Behind a load balancer that is not listed in trusted_proxies every
// client would share the balancer's address, and its rate.
func requestClientAddr(r *http.Request) netip.Addr {
	if s, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok {
		if a, err := netip.ParseAddr(s); err == nil {
			return a
		}
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
}

// ---------------------------------------------------------------------
// Domain blacklist.

// blacklist is a set of origin domains the proxy refuses, read from a
// file and reloaded when the file changes.
//
// The file has one entry per line; '#' starts a comment (whole line or
// after the entry); blank lines, surrounding spaces, a trailing "\r" and
// a leading byte-order mark are ignored:
//
//	example.com      # example.com and every name under it
//	*.example.org    # names under example.org, not example.org itself
//	192.0.2.7        # an IPv4 origin (Coralized as 192.0.2.7.nyud.net)
//
// Names are matched without regard to case or a trailing dot, by whole
// labels: "example.com" blocks "www.example.com" but not
// "badexample.com". Entries use the syntax of Coralized origins (LDH
// labels, '_' except in the last label); IDNs must be written in their
// xn-- form, since that is what requests carry.
//
// Loading: a missing or unreadable file, or a bad entry, is an error at
// startup, where the operator is looking (a skipped typo would silently
// serve a site that must be refused). Afterwards the file is checked every
// poll interval (mtime, size and identity; its content hash decides), bad
// entries are logged with their line numbers and skipped, and a file that
// disappears or cannot be read keeps the last list in force, logged once.
// Replace the file by renaming a complete new one over it: one written in
// place may be read half-written (the rest is picked up at the next
// check).
type blacklist struct {
	path string
	logf func(format string, args ...any)
	set  atomic.Pointer[blockSet]

	mu      sync.Mutex // serializes check; guards the fields below
	fi      os.FileInfo
	sum     [sha256.Size]byte
	racy    bool   // the file was modified too recently for its mtime to tell a later change apart
	problem string // the error last logged, so it is logged once

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// blockSet maps names to what they block.
type blockSet struct {
	names map[string]uint8
}

const (
	blockName = 1 << iota // the name itself
	blockSubs             // every name under it
)

// racyWindow: a file modified within this long of being read may change
// again without its mtime changing (file systems keep mtime to 1 or 2 s on
// some platforms), so it is read again at the next check whatever stat
// says.
const racyWindow = 3 * time.Second

// maxReportedLines bounds the bad lines listed in one error or log entry.
const maxReportedLines = 10

// newBlacklist loads the blacklist at path and, if every > 0, checks the
// file for changes every that long until Close. logf receives reloads and
// problems after startup (nil discards them).
func newBlacklist(path string, every time.Duration, logf func(string, ...any)) (*blacklist, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b := &blacklist{path: path, logf: logf, stop: make(chan struct{}), done: make(chan struct{})}
	fi, data, sum, racy, err := b.read()
	if err != nil {
		return nil, fmt.Errorf("coral_proxy: blacklist: %w", err)
	}
	set, bad := parseBlacklist(data)
	if len(bad) > 0 {
		return nil, fmt.Errorf("coral_proxy: blacklist %s: %d bad %s: %s", path, len(bad), plural(len(bad), "line", "lines"), joinBad(bad))
	}
	b.fi, b.sum, b.racy = fi, sum, racy
	b.set.Store(set)
	if every > 0 {
		go b.poll(every)
	} else {
		close(b.done)
	}
	return b, nil
}

// blocked reports whether host (an origin host name or IPv4 literal,
// without port) is on the list. It is safe for concurrent use and takes
// no lock.
func (b *blacklist) blocked(host string) bool {
	if b == nil {
		return false
	}
	return b.set.Load().match(host)
}

// entries is the number of entries in force.
func (b *blacklist) entries() int {
	if b == nil {
		return 0
	}
	return len(b.set.Load().names)
}

// Close stops the polling. It waits for a check under way to finish and
// may be called more than once.
func (b *blacklist) Close() {
	if b == nil {
		return
	}
	b.closeOnce.Do(func() { close(b.stop) })
	<-b.done
}

func (b *blacklist) poll(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.check()
		}
	}
}

// check reloads the list if the file changed, and reports whether it did.
// Problems are logged, never returned: the last list stays in force.
func (b *blacklist) check() (reloaded bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fi, err := os.Stat(b.path)
	if err != nil {
		b.report(err)
		return false
	}
	if !b.racy && b.problem == "" && os.SameFile(fi, b.fi) && fi.Size() == b.fi.Size() && fi.ModTime().Equal(b.fi.ModTime()) {
		return false
	}
	fi, data, sum, racy, err := b.read()
	if err != nil {
		b.report(err)
		return false
	}
	if b.problem != "" {
		b.logf("coral_proxy: blacklist %s: readable again", b.path)
		b.problem = ""
	}
	b.fi, b.racy = fi, racy
	if sum == b.sum {
		return false // touched, or a racy file read again: same content
	}
	b.sum = sum
	set, bad := parseBlacklist(data)
	if len(bad) > 0 {
		b.logf("coral_proxy: blacklist %s: skipped %d bad %s: %s", b.path, len(bad), plural(len(bad), "line", "lines"), joinBad(bad))
	}
	b.set.Store(set)
	b.logf("coral_proxy: blacklist %s reloaded: %d %s", b.path, len(set.names), plural(len(set.names), "entry", "entries"))
	return true
}

// report logs a problem reading the file, once until it changes.
func (b *blacklist) report(err error) {
	if msg := err.Error(); msg != b.problem {
		b.problem = msg
		b.logf("coral_proxy: blacklist: %v; keeping the last list read (%d %s)",
			err, b.entries(), plural(b.entries(), "entry", "entries"))
	}
}

// read reads the file, with its stat from the same open file.
func (b *blacklist) read() (fi os.FileInfo, data []byte, sum [sha256.Size]byte, racy bool, err error) {
	f, err := os.Open(b.path)
	if err != nil {
		return nil, nil, sum, false, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, nil, sum, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, sum, false, fmt.Errorf("%s: not a regular file", b.path)
	}
	start := time.Now()
	if data, err = io.ReadAll(f); err != nil {
		return nil, nil, sum, false, err
	}
	racy = !fi.ModTime().Before(start.Add(-racyWindow))
	return fi, data, sha256.Sum256(data), racy, nil
}

// match reports whether host is blocked. No allocation unless host has
// upper-case letters.
func (s *blockSet) match(host string) bool {
	if len(s.names) == 0 {
		return false
	}
	host = strings.TrimRight(lowerASCII(host), ".")
	if host == "" {
		return false
	}
	if s.names[host]&blockName != 0 {
		return true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' && s.names[host[i+1:]]&blockSubs != 0 {
			return true
		}
	}
	return false
}

// parseBlacklist parses a blacklist file. bad lists the lines skipped, as
// "line N: reason".
func parseBlacklist(data []byte) (set *blockSet, bad []string) {
	set = &blockSet{names: make(map[string]uint8)}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	for n, line := range strings.Split(string(data), "\n") {
		entry, _, _ := strings.Cut(line, "#")
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, bits, reason := parseBlacklistEntry(entry)
		if reason != "" {
			bad = append(bad, fmt.Sprintf("line %d: %q: %s", n+1, entry, reason))
			continue
		}
		set.names[name] |= bits
	}
	return set, bad
}

// parseBlacklistEntry parses one entry (comment and spaces removed).
func parseBlacklistEntry(entry string) (name string, bits uint8, reason string) {
	if strings.ContainsAny(entry, " \t\v\f\r") {
		return "", 0, "one name per line"
	}
	name, bits = entry, blockName|blockSubs
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, bits = rest, blockSubs
	}
	name = strings.TrimSuffix(lowerASCII(name), ".")
	switch {
	case name == "":
		return "", 0, "no name"
	case strings.Contains(name, "*"):
		return "", 0, `a wildcard is allowed only as a leading "*."`
	case len(name) > maxNameLen:
		return "", 0, "name longer than 253 characters"
	}
	labels := strings.Split(name, ".")
	for i, l := range labels {
		if why := checkHostLabel(l, i == len(labels)-1); why != "" {
			return "", 0, why
		}
	}
	if isDigits(labels[len(labels)-1]) {
		switch {
		case !isDottedQuad(name):
			return "", 0, "numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)"
		case bits == blockSubs:
			return "", 0, "a wildcard on an IP address"
		}
	}
	return name, bits, ""
}

func joinBad(bad []string) string {
	s := strings.Join(bad[:min(len(bad), maxReportedLines)], "; ")
	if len(bad) > maxReportedLines {
		s += fmt.Sprintf("; and %d more", len(bad)-maxReportedLines)
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ---------------------------------------------------------------------
// Per-client request rate.

// rateLimiter is a token bucket per client: rate requests a second on
// average, up to burst at once. IPv4 clients are counted per address,
// IPv6 clients per /64 (what a single subscriber is usually given).
//
// Memory is bounded: at most maxClients buckets, kept in least recently
// used order. A bucket that has been idle long enough to be full again
// holds no information and is dropped as it reaches the old end of the
// list; when the table is full of busy buckets, the least recently used
// is dropped anyway (its client starts again with a full bucket). Each
// request costs one map lookup and a few pointer moves under one mutex.
type rateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int
	idle  int64 // nanoseconds after which an untouched bucket is full

	mu      sync.Mutex
	clients map[netip.Addr]*bucket
	lru     bucket // sentinel: lru.next is the most recent, lru.prev the least
}

type bucket struct {
	key        netip.Addr
	tokens     float64
	last       int64 // UnixNano of the last update
	prev, next *bucket
}

// newRateLimiter returns a limiter of rate requests a second per client
// with bursts of burst (at least 1), tracking at most maxClients clients
// (defaultMaxClients if ≤ 0). A rate ≤ 0 (or NaN) means no limit: the
// result is nil, whose allow always says yes.
func newRateLimiter(rate float64, burst int, maxClients int) *rateLimiter {
	if !(rate > 0) {
		return nil
	}
	if maxClients <= 0 {
		maxClients = defaultMaxClients
	}
	l := &rateLimiter{
		rate:    rate,
		burst:   float64(max(burst, 1)),
		max:     maxClients,
		clients: make(map[netip.Addr]*bucket),
	}
	if idle := l.burst / rate * 1e9; idle < float64(math.MaxInt64) {
		l.idle = int64(math.Ceil(idle))
	} else {
		l.idle = math.MaxInt64
	}
	l.lru.next, l.lru.prev = &l.lru, &l.lru
	return l
}

// rateKey is what a client is counted by: the IPv4 address (also for
// IPv4-mapped IPv6), or the IPv6 /64; zones are dropped.
func rateKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// allow takes a token for the client at ip at time now. When there is
// none, ok is false and retryAfter is how long until there is one. An
// invalid ip is not limited. Times earlier than the client's last request
// are taken as equal to it.
func (l *rateLimiter) allow(ip netip.Addr, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil || !ip.IsValid() {
		return true, 0
	}
	key := rateKey(ip)
	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[key]
	if b != nil {
		if elapsed := t - b.last; elapsed > 0 {
			b.tokens = min(l.burst, b.tokens+float64(elapsed)/1e9*l.rate)
			b.last = t
		}
		l.unlink(b)
	} else {
		b = l.newBucket(key, t)
	}
	l.pushFront(b)
	// Reclaim up to two idle buckets per request, so the table shrinks
	// back after a crowd has gone.
	for range 2 {
		old := l.lru.prev
		if old == &l.lru || old == b || t-old.last < l.idle {
			break
		}
		l.remove(old)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := (1 - b.tokens) / l.rate * 1e9
	return false, time.Duration(math.Ceil(min(wait, float64(math.MaxInt64/2))))
}

// newBucket makes a full bucket for key, evicting the least recently used
// bucket if the table is full (and reusing its memory).
func (l *rateLimiter) newBucket(key netip.Addr, t int64) *bucket {
	var b *bucket
	if len(l.clients) >= l.max {
		b = l.lru.prev
		l.remove(b)
		*b = bucket{}
	} else {
		b = new(bucket)
	}
	b.key, b.tokens, b.last = key, l.burst, t
	l.clients[key] = b
	return b
}

func (l *rateLimiter) remove(b *bucket) {
	l.unlink(b)
	delete(l.clients, b.key)
}

func (l *rateLimiter) unlink(b *bucket) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
}

func (l *rateLimiter) pushFront(b *bucket) {
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
}

// tracked is the number of clients in the table.
func (l *rateLimiter) tracked() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// ---------------------------------------------------------------------
// Bandwidth budget.

// bandwidthBudget is the number of bytes the proxy may serve per window,
// CoralCDN's per-node budget. Windows are aligned on multiples of the
// window since the Unix epoch, so a 24 h window is the UTC day and a 1 h
// window the clock hour. Accounting is a lock-free atomic add; the window
// rolls over on the first call that sees a later time. Responses in
// progress when the budget runs out are finished, so the budget can be
// overrun by what they still send.
type bandwidthBudget struct {
	limit  int64
	window int64 // nanoseconds
	cur    atomic.Pointer[budgetWindow]
}

type budgetWindow struct {
	index int64 // UnixNano / window
	used  atomic.Int64
}

// newBandwidthBudget returns a budget of bytes per window
// (defaultBudgetWindow if ≤ 0). bytes ≤ 0 means no budget: the result is
// nil, which is never exceeded.
func newBandwidthBudget(bytes int64, window time.Duration) *bandwidthBudget {
	if bytes <= 0 {
		return nil
	}
	if window <= 0 {
		window = defaultBudgetWindow
	}
	b := &bandwidthBudget{limit: bytes, window: int64(window)}
	b.cur.Store(&budgetWindow{index: math.MinInt64})
	return b
}

// current returns the window now falls in. A time before the current
// window (a clock step back) counts in the current window.
func (b *bandwidthBudget) current(now time.Time) *budgetWindow {
	idx := now.UnixNano() / b.window
	w := b.cur.Load()
	for w.index < idx {
		nw := &budgetWindow{index: idx}
		if b.cur.CompareAndSwap(w, nw) {
			return nw
		}
		w = b.cur.Load()
	}
	return w
}

// exceeded reports whether the bytes served in now's window have reached
// the budget.
func (b *bandwidthBudget) exceeded(now time.Time) bool {
	if b == nil {
		return false
	}
	return b.current(now).used.Load() >= b.limit
}

// add counts n bytes served at now.
func (b *bandwidthBudget) add(n int64, now time.Time) {
	if b == nil || n <= 0 {
		return
	}
	b.current(now).used.Add(n)
}

// used is the number of bytes counted in now's window.
func (b *bandwidthBudget) used(now time.Time) int64 {
	if b == nil {
		return 0
	}
	return b.current(now).used.Load()
}

// ---------------------------------------------------------------------
// The redirect to the origin.

// noServeParam is what a site's "redirect to Coral" rule looks for. The
// rule CoralCDN documented for Apache is
//
//	RewriteCond %{QUERY_STRING} !(^|&)coral-no-serve$
//
// so the parameter goes last and bare (no "=").
const noServeParam = "coral-no-serve"

// noServeRedirect returns originURL, an absolute http or https URL, with
// coral-no-serve as the last query parameter. The existing query is kept
// as it is, parameter order included, except that bytes a URL may not
// carry (controls, spaces, non-ASCII, and '%' not followed by two hex
// digits) are percent-encoded. User information and the fragment are
// dropped, an empty path becomes "/", and a URL already ending in
// coral-no-serve is returned as it is (less those).
func noServeRedirect(originURL string) (string, error) {
	u, err := url.Parse(originURL)
	if err != nil {
		return "", err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("origin URL %q: not http or https", originURL)
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return "", fmt.Errorf("origin URL %q: no host", originURL)
	}
	if !plainHost(u.Hostname()) {
		return "", fmt.Errorf("origin URL %q: host is not a plain name or IP address", originURL)
	}
	u.User = nil
	u.Fragment, u.RawFragment = "", ""
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
	}
	q := escapeQuery(u.RawQuery)
	switch {
	case q == noServeParam || strings.HasSuffix(q, "&"+noServeParam):
	case q == "" || strings.HasSuffix(q, "&"):
		q += noServeParam
	default:
		q += "&" + noServeParam
	}
	u.RawQuery, u.ForceQuery = q, false
	out := u.String()
	if _, err := url.Parse(out); err != nil {
		return "", fmt.Errorf("origin URL %q: %w", originURL, err)
	}
	return out, nil
}

// plainHost reports whether host is an IP address without zone, or a name
// made of ASCII letters, digits, '-', '_' and '.' (origins are; this keeps
// anything odd out of a Location header).
func plainHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Zone() == ""
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// escapeQuery percent-encodes the bytes of q that may not appear in a
// URL's query (RFC 3986 §3.4), a '%' not starting an escape included, and
// leaves the rest (valid escapes too) as they are.
func escapeQuery(q string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	escaped := false
	for i := 0; i < len(q); i++ {
		c := q[i]
		if isQueryChar(c) || c == '%' && i+2 < len(q) && isHexDigit(q[i+1]) && isHexDigit(q[i+2]) {
			if escaped {
				b.WriteByte(c)
			}
			continue
		}
		if !escaped {
			escaped = true
			b.Grow(len(q) + 16)
			b.WriteString(q[:i])
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	if !escaped {
		return q
	}
	return b.String()
}
