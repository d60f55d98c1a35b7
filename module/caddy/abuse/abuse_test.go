package abuse

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/coralname"
)

// ---------------------------------------------------------------------
// Blacklist.

// logRecorder collects what a blacklist logs.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// take returns the lines logged since the last take.
func (l *logRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.lines
	l.lines = nil
	return s
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setMtime sets path's modification time.
func setMtime(t *testing.T, path string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// loadBlacklist writes content to a fresh file and loads it without
// polling.
func loadBlacklist(t *testing.T, content string) (*Blacklist, string, *logRecorder) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blacklist")
	writeFile(t, path, content)
	var log logRecorder
	b, err := NewBlacklist(path, 0, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, path, &log
}

func TestBlacklistMatch(t *testing.T) {
	b, _, _ := loadBlacklist(t, strings.Join([]string{
		"example.com",
		"*.wild.example.net",
		"Shout.EXAMPLE.org.",
		"both.example # both forms of one name",
		"*.both.example",
		"192.0.2.7",
		"a.b.c.d.deep.example",
		"my_site.example.info",
	}, "\n"))
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"example.com", true},
		{"www.example.com", true},
		{"a.b.c.example.com", true},
		{"EXAMPLE.COM", true},
		{"Www.Example.Com", true},
		{"example.com.", true},
		{"www.example.com..", true},
		{"badexample.com", false}, // not a suffix match
		{"example.com.evil.net", false},
		{"example.co", false},
		{"com", false},
		{"xexample.com", false},
		{"x-example.com", false},

		{"wild.example.net", false}, // "*." blocks only names under it
		{"a.wild.example.net", true},
		{"a.b.wild.example.net", true},
		{"A.WILD.EXAMPLE.NET.", true},
		{"awild.example.net", false},
		{"example.net", false},

		{"shout.example.org", true}, // entry case and trailing dot do not matter
		{"x.shout.example.org", true},
		{"example.org", false},

		{"both.example", true},
		{"x.both.example", true},

		{"192.0.2.7", true},
		{"192.0.2.70", false},
		{"1.192.0.2.7", true}, // cannot occur (not a valid origin); harmless
		{"92.0.2.7", false},

		{"a.b.c.d.deep.example", true},
		{"b.c.d.deep.example", false},
		{"deep.example", false},

		{"my_site.example.info", true},

		{"", false},
		{".", false},
		{"..", false},
		{".example.com", true}, // an empty first label under a blocked name
	} {
		if got := b.Blocked(tc.host); got != tc.want {
			t.Errorf("blocked(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
	if n := b.entries(); n != 7 {
		t.Errorf("entries() = %d, want 7 (both.example counted once)", n)
	}
}

func TestBlacklistExampleFile(t *testing.T) {
	b, err := NewBlacklist("testdata/blacklist.txt", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for host, want := range map[string]bool{
		"journals.example.com":      true,
		"www.journals.example.com":  true,
		"example.com":               false,
		"users.example.net":         false,
		"alice.users.example.net":   true,
		"www.example.org":           true,
		"192.0.2.7":                 true,
		"www.xn--bcher-kva.example": true,
	} {
		if got := b.Blocked(host); got != want {
			t.Errorf("blocked(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestBlacklistParse(t *testing.T) {
	data := "\ufeffgood.example\r\n" + // 1: BOM and CRLF
		"  spaced.example  \t# comment\n" + // 2
		"\n" + // 3
		"# whole-line comment\n" + // 4
		"two names.example\n" + // 5
		"*.\n" + // 6
		"*\n" + // 7
		"a.*.example\n" + // 8
		"*example.com\n" + // 9
		"a..example\n" + // 10
		"-dash.example\n" + // 11
		"bücher.example\n" + // 12
		"1.2.3\n" + // 13
		"*.192.0.2.1\n" + // 14
		"example.123\n" + // 15
		"under.score_\n" + // 16
		strings.Repeat("a", 64) + ".example\n" + // 17
		strings.Repeat("abcdefghi.", 26) + "com\n" + // 18: 263 characters
		"#\n" + // 19
		"*.wild.example\n" + // 20
		"192.0.2.1\n" + // 21
		"http://url.example/\n" + // 22
		"last.example" // 23: no final newline
	set, bad := parseBlacklist([]byte(data))
	wantBad := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 22}
	if len(bad) != len(wantBad) {
		t.Fatalf("bad lines:\n%s\nwant lines %v", strings.Join(bad, "\n"), wantBad)
	}
	for i, n := range wantBad {
		if !strings.HasPrefix(bad[i], fmt.Sprintf("line %d: ", n)) {
			t.Errorf("bad[%d] = %q, want line %d", i, bad[i], n)
		}
	}
	want := map[string]uint8{
		"good.example":   blockName | blockSubs,
		"spaced.example": blockName | blockSubs,
		"wild.example":   blockSubs,
		"192.0.2.1":      blockName | blockSubs,
		"last.example":   blockName | blockSubs,
	}
	if len(set.names) != len(want) {
		t.Errorf("names = %v, want %v", set.names, want)
	}
	for k, v := range want {
		if set.names[k] != v {
			t.Errorf("names[%q] = %b, want %b", k, set.names[k], v)
		}
	}
	for _, s := range bad {
		if strings.Contains(s, "bücher") && !strings.Contains(s, "punycode") {
			t.Errorf("IDN entry not explained: %q", s)
		}
	}
}

func TestBlacklistStartupErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewBlacklist(filepath.Join(dir, "missing"), 0, nil); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want a not-exist error", err)
	}
	if _, err := NewBlacklist(dir, 0, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: err = %v", err)
	}
	// Bad entries are an error at startup, all reported with line numbers
	// (up to a bound).
	path := filepath.Join(dir, "bad")
	var lines []string
	for i := range 15 {
		lines = append(lines, "ok.example", fmt.Sprintf("bad%d..example", i))
	}
	writeFile(t, path, strings.Join(lines, "\n"))
	_, err := NewBlacklist(path, 0, nil)
	if err == nil {
		t.Fatal("bad lines at startup: no error")
	}
	msg := err.Error()
	for _, s := range []string{"15 bad lines", "line 2: ", "line 20: ", "and 5 more"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if strings.Contains(msg, "line 22: ") {
		t.Errorf("error %q lists more than %d lines", msg, maxReportedLines)
	}
	// An empty file is a valid, empty list.
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "# nothing yet\n")
	b, err := NewBlacklist(empty, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.entries() != 0 || b.Blocked("example.com") {
		t.Error("empty list blocks")
	}
	b.Close()
}

func TestBlacklistReload(t *testing.T) {
	b, path, log := loadBlacklist(t, "aaa.example\n")
	if !b.Blocked("aaa.example") {
		t.Fatal("initial list not in force")
	}

	// A change is picked up.
	writeFile(t, path, "bbb.example\nccc.example\n")
	if !b.check() {
		t.Fatal("change not reloaded")
	}
	if b.Blocked("aaa.example") || !b.Blocked("bbb.example") || !b.Blocked("ccc.example") {
		t.Error("new list not in force")
	}
	if l := log.take(); len(l) != 1 || !strings.Contains(l[0], "reloaded: 2 entries") {
		t.Errorf("log = %q", l)
	}

	// Nothing changed: no reload, nothing logged.
	if b.check() {
		t.Error("reloaded an unchanged file")
	}
	if l := log.take(); len(l) != 0 {
		t.Errorf("log = %q", l)
	}

	// Bad lines after startup are logged with their numbers and skipped;
	// the good ones apply.
	writeFile(t, path, "good.example\nbad name.example\n*.\nother.example\n")
	if !b.check() {
		t.Fatal("not reloaded")
	}
	if !b.Blocked("good.example") || !b.Blocked("other.example") || b.Blocked("bbb.example") {
		t.Error("good lines of a partly bad file not in force")
	}
	l := log.take()
	if len(l) != 2 || !strings.Contains(l[0], "skipped 2 bad lines") || !strings.Contains(l[0], "line 2: ") ||
		!strings.Contains(l[0], "line 3: ") || !strings.Contains(l[1], "reloaded: 2 entries") {
		t.Errorf("log = %q", l)
	}

	// The file disappears: the last list stays, logged once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if b.check() {
			t.Error("reloaded a missing file")
		}
	}
	if !b.Blocked("good.example") {
		t.Error("last list dropped when the file disappeared")
	}
	if l := log.take(); len(l) != 1 || !strings.Contains(l[0], "keeping the last list read (2 entries)") {
		t.Errorf("log = %q", l)
	}

	// It comes back.
	writeFile(t, path, "back.example\n")
	if !b.check() {
		t.Fatal("reappeared file not loaded")
	}
	if !b.Blocked("back.example") || b.Blocked("good.example") {
		t.Error("reappeared file not in force")
	}
	if l := log.take(); len(l) != 2 || !strings.Contains(l[0], "readable again") {
		t.Errorf("log = %q", l)
	}

	// Replaced by rename (the recommended way), with the same size and
	// mtime: a different file, so it is read.
	mt := time.Now().Add(-time.Hour).Truncate(time.Second)
	setMtime(t, path, mt)
	b.check()
	tmp := path + ".new"
	writeFile(t, tmp, "renu.example\n")
	setMtime(t, tmp, mt)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if !b.check() || !b.Blocked("renu.example") {
		t.Error("file replaced by rename not reloaded")
	}
}

// An in-place rewrite within the file system's mtime granularity may leave
// size and mtime as they were; a file modified that recently is read again
// whatever stat says.
func TestBlacklistRacyRewrite(t *testing.T) {
	b, path, _ := loadBlacklist(t, "aaa.example\n")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mt := fi.ModTime()
	writeFile(t, path, "bbb.example\n") // same size, same inode
	setMtime(t, path, mt)               // as if within the same mtime tick
	if !b.check() || !b.Blocked("bbb.example") {
		t.Fatal("same-size rewrite of a recently modified file missed")
	}

	// Once the mtime is old, an unchanged stat means an unchanged file and
	// the file is not read. (Only a rewrite that also restored the old
	// mtime by hand could go unseen.)
	old := time.Now().Add(-time.Hour)
	setMtime(t, path, old)
	if b.check() {
		t.Error("content unchanged, yet reloaded")
	}
	if b.racy {
		t.Error("an hour-old file still counted as racy")
	}
	writeFile(t, path, "ccc.example\n")
	setMtime(t, path, old)
	if b.check() || !b.Blocked("bbb.example") {
		t.Error("file read although its stat was unchanged and old")
	}
	setMtime(t, path, old.Add(time.Second))
	if !b.check() || !b.Blocked("ccc.example") {
		t.Error("changed mtime not noticed")
	}
}

// The poller reloads on its own and stops on Close.
func TestBlacklistPolling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blacklist")
	writeFile(t, path, "one.example\n")
	b, err := NewBlacklist(path, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	writeFile(t, tmp, "two.example\n")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !b.Blocked("two.example") {
		if time.Now().After(deadline) {
			t.Fatal("the poller did not reload the file")
		}
		time.Sleep(time.Millisecond)
	}
	b.Close()
	select {
	case <-b.done:
	default:
		t.Fatal("poller still running after Close")
	}
	b.Close() // twice is fine
}

func TestBlacklistConcurrent(t *testing.T) {
	b, path, _ := loadBlacklist(t, "a.example\n")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					b.Blocked("www.a.example")
					b.Blocked("www.b.example")
				}
			}
		})
	}
	for i := range 50 {
		writeFile(t, path, fmt.Sprintf("a.example\nb%d.example\n", i))
		b.check()
	}
	close(stop)
	wg.Wait()
	if !b.Blocked("b49.example") {
		t.Error("last list not in force")
	}
}

func TestBlacklistNil(t *testing.T) {
	var b *Blacklist
	if b.Blocked("example.com") || b.entries() != 0 {
		t.Error("nil blacklist blocks")
	}
	b.Close()
}

// ---------------------------------------------------------------------
// Rate limiter.

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestRateLimiterBucket(t *testing.T) {
	l := NewRateLimiter(2, 4, 100) // 2 a second, bursts of 4
	ip := netip.MustParseAddr("198.51.100.1")
	for i := range 4 {
		if ok, _ := l.Allow(ip, t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow(ip, t0)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("over the burst: ok=%v wait=%v, want refused for 500ms", ok, wait)
	}
	// Refusals take no token, and the wait shrinks as time passes.
	ok, wait = l.Allow(ip, t0.Add(200*time.Millisecond))
	if ok || wait != 300*time.Millisecond {
		t.Fatalf("after 200ms: ok=%v wait=%v, want refused for 300ms", ok, wait)
	}
	if ok, _ := l.Allow(ip, t0.Add(500*time.Millisecond)); !ok {
		t.Fatal("token not refilled after 500ms")
	}
	if ok, _ := l.Allow(ip, t0.Add(500*time.Millisecond)); ok {
		t.Fatal("two tokens from one refill")
	}
	// Another client is not affected.
	if ok, _ := l.Allow(netip.MustParseAddr("198.51.100.2"), t0); !ok {
		t.Fatal("other client refused")
	}
	// A long pause refills to the burst, no more.
	later := t0.Add(time.Hour)
	n := 0
	for {
		if ok, _ := l.Allow(ip, later); !ok {
			break
		}
		n++
	}
	if n != 4 {
		t.Errorf("after an hour: %d requests allowed at once, want the burst, 4", n)
	}
	// Time going backwards is taken as no time passing.
	if ok, _ := l.Allow(ip, t0); ok {
		t.Error("allowed with an earlier time")
	}
	if ok, _ := l.Allow(ip, later.Add(500*time.Millisecond)); !ok {
		t.Error("refill after a clock step back")
	}
}

func TestRateLimiterKeys(t *testing.T) {
	l := NewRateLimiter(1, 1, 100)
	take := func(s string) bool {
		ok, _ := l.Allow(netip.MustParseAddr(s), t0)
		return ok
	}
	// IPv6 clients share a bucket per /64.
	if !take("2001:db8:1:2::1") {
		t.Fatal("first request refused")
	}
	if take("2001:db8:1:2:ffff:ffff:ffff:ffff") {
		t.Error("same /64 not aggregated")
	}
	if take("fe80::1%eth0") != true || take("fe80::2%eth1") {
		t.Error("zones not ignored")
	}
	if !take("2001:db8:1:3::1") {
		t.Error("next /64 refused")
	}
	// IPv4 per address; IPv4-mapped IPv6 is the same client.
	if !take("192.0.2.1") {
		t.Fatal("IPv4 refused")
	}
	if take("::ffff:192.0.2.1") {
		t.Error("IPv4-mapped address counted separately")
	}
	if !take("192.0.2.2") {
		t.Error("neighbouring IPv4 address aggregated")
	}
	// No address: not limited.
	for range 3 {
		if ok, _ := l.Allow(netip.Addr{}, t0); !ok {
			t.Error("invalid address limited")
		}
	}
}

func TestRateLimiterEviction(t *testing.T) {
	l := NewRateLimiter(1, 2, 3) // a bucket is full again 2 s after its last use
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	for i := range 3 {
		l.Allow(addr(i), t0)
		l.Allow(addr(i), t0) // each bucket now empty
	}
	l.Allow(addr(0), t0.Add(time.Millisecond)) // 0 is now the most recent
	// A fourth client evicts the least recently used, 1.
	l.Allow(addr(3), t0.Add(2*time.Millisecond))
	if n := l.Tracked(); n != 3 {
		t.Fatalf("tracked %d clients, want 3", n)
	}
	at := t0.Add(3 * time.Millisecond)
	if ok, _ := l.Allow(addr(2), at); ok {
		t.Error("client 2 was evicted (its empty bucket forgotten)")
	}
	if ok, _ := l.Allow(addr(1), at); !ok {
		t.Error("client 1 not evicted (the least recently used)")
	}

	// Many clients: the table stays within its bound.
	big := NewRateLimiter(10, 50, 1000)
	for i := range 20000 {
		big.Allow(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), t0.Add(time.Duration(i)*time.Microsecond))
		if big.Tracked() > 1000 {
			t.Fatalf("%d clients tracked, bound 1000", big.Tracked())
		}
	}
	if len(big.clients) != 1000 {
		t.Errorf("map size %d", len(big.clients))
	}
	// Idle buckets (full again: 5 s at 10/s with bursts of 50) are
	// reclaimed as requests come, two per request, so the table shrinks
	// back after the crowd.
	late := t0.Add(time.Minute)
	for i := range 600 {
		big.Allow(netip.MustParseAddr("192.0.2.1"), late.Add(time.Duration(i)*time.Millisecond))
	}
	if n := big.Tracked(); n != 1 {
		t.Errorf("%d clients tracked after all but one went idle, want 1", n)
	}
	// The list and the map agree.
	n := 0
	for b := big.lru.next; b != &big.lru; b = b.next {
		if big.clients[b.key] != b {
			t.Fatalf("list entry %v not in the map", b.key)
		}
		n++
	}
	if n != len(big.clients) {
		t.Errorf("list has %d entries, map %d", n, len(big.clients))
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	l := NewRateLimiter(1, 100, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				ip := netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i % 4)})
				if ok, _ := l.Allow(ip, t0); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	// 32 clients, 100 tokens each, no time passing (64 slots: no eviction).
	if allowed != 32*100 {
		t.Errorf("allowed %d, want %d", allowed, 32*100)
	}
}

func TestRateLimiterOff(t *testing.T) {
	for _, r := range []float64{0, -1, nanFloat()} {
		if l := NewRateLimiter(r, 10, 10); l != nil {
			t.Errorf("rate %v: limiter not off", r)
		}
	}
	var l *RateLimiter
	if ok, _ := l.Allow(netip.MustParseAddr("192.0.2.1"), t0); !ok || l.Tracked() != 0 {
		t.Error("nil limiter refuses")
	}
	// A burst below 1 is 1; a huge burst does not overflow the idle time.
	one := NewRateLimiter(1, 0, 0)
	if ok, _ := one.Allow(netip.MustParseAddr("192.0.2.1"), t0); !ok || one.max != DefaultMaxClients {
		t.Error("burst 0 not taken as 1, or maxClients 0 not the default")
	}
	huge := NewRateLimiter(1e-300, 1<<62, 10)
	if ok, _ := huge.Allow(netip.MustParseAddr("192.0.2.1"), t0); !ok || huge.idle <= 0 {
		t.Error("huge burst mishandled")
	}
}

func nanFloat() float64 {
	var zero float64
	return zero / zero
}

// ---------------------------------------------------------------------
// Bandwidth budget.

func TestBandwidthBudget(t *testing.T) {
	b := NewBudget(1000, time.Hour)
	at := time.Date(2025, 6, 1, 10, 30, 0, 0, time.UTC)
	if b.Exceeded(at) {
		t.Fatal("exceeded before any use")
	}
	b.Add(600, at)
	if b.Exceeded(at) || b.Used(at) != 600 {
		t.Fatalf("600 of 1000: exceeded=%v used=%d", b.Exceeded(at), b.Used(at))
	}
	b.Add(399, at.Add(10*time.Minute))
	if b.Exceeded(at) {
		t.Fatal("999 of 1000 counts as exceeded")
	}
	b.Add(1, at.Add(29*time.Minute+59*time.Second)) // 10:59:59
	if !b.Exceeded(at.Add(29 * time.Minute)) {
		t.Fatal("1000 of 1000 not exceeded")
	}
	b.Add(-5, at) // ignored
	if b.Used(at) != 1000 {
		t.Fatalf("used %d", b.Used(at))
	}
	// Windows are clock hours: 11:00:00 starts afresh.
	next := time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC)
	if b.Exceeded(next) || b.Used(next) != 0 {
		t.Fatal("budget not renewed at the next window")
	}
	b.Add(10, next)
	// A clock step back counts in the current window.
	if b.Used(at) != 10 || b.Exceeded(at) {
		t.Error("an earlier time reopened the old window")
	}
	// Skipping windows works too.
	if b.Used(next.Add(50*time.Hour)) != 0 {
		t.Error("not renewed after a gap")
	}
	// A day window follows the UTC day.
	d := NewBudget(1, 0)
	d.Add(1, time.Date(2025, 6, 1, 23, 59, 59, 0, time.UTC))
	if !d.Exceeded(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)) {
		t.Error("day window: same UTC day not exceeded")
	}
	if d.Exceeded(time.Date(2025, 6, 2, 0, 0, 0, 0, time.UTC)) {
		t.Error("day window: next UTC day exceeded")
	}
	// Off.
	if NewBudget(0, time.Hour) != nil || NewBudget(-1, time.Hour) != nil {
		t.Error("budget 0 not off")
	}
	var off *Budget
	off.Add(1<<40, at)
	if off.Exceeded(at) || off.Used(at) != 0 {
		t.Error("nil budget exceeded")
	}
}

func TestBandwidthBudgetConcurrent(t *testing.T) {
	// Every goroutine adds in one window, then in the next: whichever add
	// rolls the window over, no byte is lost or counted twice. (Adds at
	// the old window's time that come after the rollover count in the new
	// window, as a clock step back would.)
	b := NewBudget(1<<40, time.Second)
	first := b.current(t0)
	second := t0.Add(time.Second)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 500 {
				b.Add(1, t0)
				b.Exceeded(t0)
			}
			for range 500 {
				b.Add(2, second)
				b.Exceeded(second)
			}
		})
	}
	wg.Wait()
	fromFirst := 16*500 - first.used.Load() // first-window adds made after the rollover
	if got, want := b.Used(second), 16*500*2+fromFirst; got != want {
		t.Errorf("second window counted %d, want %d (first window kept %d)", got, want, first.used.Load())
	}
	if b.current(second) == first || b.current(t0) != b.current(second) {
		t.Error("window not rolled over, or rolled back")
	}
}

// ---------------------------------------------------------------------
// Redirect to the origin.

// noServeRule is the rule CoralCDN gave sites for their Apache
// configuration: the parameter must end the query.
var noServeRule = regexp.MustCompile(`(^|&)coral-no-serve$`)

func TestNoServeRedirect(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://example.com/a.jpg", "http://example.com/a.jpg?coral-no-serve"},
		{"http://example.com", "http://example.com/?coral-no-serve"},
		{"http://example.com/a?x=1&y=2", "http://example.com/a?x=1&y=2&coral-no-serve"},
		{"http://example.com/a?y=2&x=1", "http://example.com/a?y=2&x=1&coral-no-serve"}, // order kept
		{"http://example.com/a?x=1&", "http://example.com/a?x=1&coral-no-serve"},
		{"http://example.com/a?", "http://example.com/a?coral-no-serve"},
		{"http://example.com/a?coral-no-serve", "http://example.com/a?coral-no-serve"},
		{"http://example.com/a?x=1&coral-no-serve", "http://example.com/a?x=1&coral-no-serve"},
		{"http://example.com/a?coral-no-serve&x=1", "http://example.com/a?coral-no-serve&x=1&coral-no-serve"},
		{"http://example.com/a?xcoral-no-serve", "http://example.com/a?xcoral-no-serve&coral-no-serve"},
		{"http://example.com/a?q=a%20b&r=%2F", "http://example.com/a?q=a%20b&r=%2F&coral-no-serve"},
		{"http://example.com/a?q=a b", "http://example.com/a?q=a%20b&coral-no-serve"},
		{"http://example.com/a?q=100%&r=%zz", "http://example.com/a?q=100%25&r=%25zz&coral-no-serve"},
		{"http://example.com/a?q=é", "http://example.com/a?q=%C3%A9&coral-no-serve"},
		{"http://example.com/a?q=<\"{}|\\^`>", "http://example.com/a?q=%3C%22%7B%7D%7C%5C%5E%60%3E&coral-no-serve"},
		{"http://example.com/a?q=a+b;c=d/e?f:g@h", "http://example.com/a?q=a+b;c=d/e?f:g@h&coral-no-serve"},
		{"http://example.com/a#frag", "http://example.com/a?coral-no-serve"},
		{"http://example.com/a?x=1#frag", "http://example.com/a?x=1&coral-no-serve"},
		{"http://user:pw@example.com/a", "http://example.com/a?coral-no-serve"},
		{"HTTPS://example.com:8443/a%2Fb/c%20d", "https://example.com:8443/a%2Fb/c%20d?coral-no-serve"},
		{"http://192.0.2.7:8080/", "http://192.0.2.7:8080/?coral-no-serve"},
	} {
		got, err := NoServeRedirect(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NoServeRedirect(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		checkNoServeRedirect(t, tc.in, got)
	}
	for _, in := range []string{
		"", "/relative?x", "example.com/a", "ftp://example.com/", "http:///nohost", "http://:80/",
		"mailto:someone@example.com", "http:opaque", "http://bad host/", "http://example.com/\x00",
		"javascript:alert(1)", "http://[::%25\xb3]", "http://[fe80::1%25eth0]/", "http://a%C3%A9.example/", "http://a<b/",
	} {
		if got, err := NoServeRedirect(in); err == nil {
			t.Errorf("NoServeRedirect(%q) = %q, want an error", in, got)
		}
	}
}

// checkNoServeRedirect checks what must hold of out = NoServeRedirect(in).
func checkNoServeRedirect(t *testing.T, in, out string) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c <= ' ' || c >= 0x7f {
			t.Fatalf("NoServeRedirect(%q) = %q: byte %#x not allowed in a Location", in, out, c)
		}
	}
	u, err := url.Parse(out)
	if err != nil {
		t.Fatalf("NoServeRedirect(%q) = %q, which does not parse: %v", in, out, err)
	}
	orig, _ := url.Parse(in)
	if u.Scheme != strings.ToLower(orig.Scheme) || u.Host != orig.Host || u.User != nil || u.Fragment != "" {
		t.Fatalf("NoServeRedirect(%q) = %q: scheme, host, user or fragment wrong", in, out)
	}
	wantPath := orig.EscapedPath()
	if wantPath == "" {
		wantPath = "/"
	}
	if u.EscapedPath() != wantPath {
		t.Fatalf("NoServeRedirect(%q) = %q: path %q, want %q", in, out, u.EscapedPath(), wantPath)
	}
	if !noServeRule.MatchString(u.RawQuery) {
		t.Fatalf("NoServeRedirect(%q) = %q: query %q does not end in coral-no-serve", in, out, u.RawQuery)
	}
	if _, ok := u.Query()["coral-no-serve"]; !ok {
		t.Fatalf("NoServeRedirect(%q) = %q: no coral-no-serve parameter", in, out)
	}
	if q := coralname.EscapeQuery(orig.RawQuery); !strings.HasPrefix(u.RawQuery, strings.TrimSuffix(q, "&")) {
		t.Fatalf("NoServeRedirect(%q) = %q: query %q does not keep %q", in, out, u.RawQuery, q)
	}
	if again, err := NoServeRedirect(out); err != nil || again != out {
		t.Fatalf("NoServeRedirect not idempotent: %q → %q → %q, %v", in, out, again, err)
	}
}

func FuzzNoServeRedirect(f *testing.F) {
	for _, s := range []string{
		"http://example.com/a.jpg", "http://example.com", "http://example.com/a?x=1&", "http://example.com/a?",
		"http://example.com/a?x=1&coral-no-serve", "http://example.com/a?q=100%&r=%zz", "http://example.com/a?q=é",
		"http://example.com/a#frag", "http://user:pw@example.com/a", "HTTPS://example.com:8443/a%2Fb/c%20d",
		"http://[::1]:80/x?y", "http://[fe80::1%25eth0]/", "http://a%C3%A9.example/", "ftp://x/", "http:///x",
		"/relative", "", "http://example.com/a?q=a\tb", "http://[::%25\xb3]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NoServeRedirect(in)
		if err != nil {
			if u, perr := url.Parse(in); perr == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" && u.Opaque == "" && plainHost(u.Hostname()) {
				t.Fatalf("NoServeRedirect(%q) refused a parseable http URL: %v", in, err)
			}
			return
		}
		checkNoServeRedirect(t, in, out)
	})
}
