package abuse

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
)

var listNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func signedFor(t *testing.T, key ed25519.PrivateKey, version uint64, signed time.Time, names ...string) *SignedList {
	t.Helper()
	var entries []Entry
	for _, n := range names {
		e, ok, problem := ParseEntry(n)
		if !ok || problem != "" {
			t.Fatalf("entry %q: %s", n, problem)
		}
		entries = append(entries, e)
	}
	l, err := SignList(key, version, signed, signed.Add(30*24*time.Hour), entries)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSignedListRoundTrip: a signed list verifies with its key, decodes
// to what was signed, and names the key.
func TestSignedListRoundTrip(t *testing.T) {
	pub, priv := fleet.GenerateKey()
	l := signedFor(t, priv, 7, listNow, "example.com # asked, ticket 812", "*.example.org expires=2027-01-31", "192.0.2.7")
	got, err := ParseSignedList(l.Raw, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 7 || !got.Signed.Equal(listNow) || got.KeyID != KeyFingerprint(pub) || len(got.Entries) != 3 {
		t.Fatalf("got %+v", got)
	}
	want := []Entry{{Name: "example.com", Reason: "asked, ticket 812"},
		{Name: "*.example.org", Expires: time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)},
		{Name: "192.0.2.7"}}
	for i, e := range want {
		if got.Entries[i] != e {
			t.Errorf("entry %d = %+v, want %+v", i, got.Entries[i], e)
		}
	}
	set := got.blockSet()
	at := func(tm time.Time) func() time.Time { return func() time.Time { return tm } }
	for host, blocked := range map[string]bool{"www.example.com": true, "example.org": false, "a.example.org": true, "192.0.2.7": true, "other.example": false} {
		if set.match(host, at(listNow)) != blocked {
			t.Errorf("%s: blocked = %v, want %v", host, !blocked, blocked)
		}
	}
	if set.match("a.example.org", at(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC))) {
		t.Error("an entry past its expiry still blocks")
	}
	if !strings.HasPrefix(string(l.Raw), SignedListFormat+"\nversion 7\nsigned 2026-11-29T12:00:00Z\n") {
		t.Errorf("list text:\n%s", l.Raw)
	}
}

// TestSignedListForged: a list signed by another key, or changed after
// signing in any byte, is refused as forged; so is one whose signature
// line names the right key with a wrong signature.
func TestSignedListForged(t *testing.T) {
	pub, priv := fleet.GenerateKey()
	_, other := fleet.GenerateKey()
	keys := []ed25519.PublicKey{pub}
	if _, err := ParseSignedList(signedFor(t, other, 1, listNow, "example.com").Raw, keys); !errors.Is(err, ErrListSignature) {
		t.Errorf("another key's list: %v", err)
	}
	good := signedFor(t, priv, 2, listNow, "example.com", "example.net").Raw
	for _, edit := range []struct{ from, to string }{
		{"example.net\n", "example.nex\n"},               // an entry changed
		{"example.net\n", "#xample.net\n"},               // an entry commented out
		{"version 2\n", "version 9\n"},                   // the version raised
		{"example.com\n", "example.com\nevil.example\n"}, // an entry added
	} {
		forged := bytes.Replace(good, []byte(edit.from), []byte(edit.to), 1)
		if _, err := ParseSignedList(forged, keys); !errors.Is(err, ErrListSignature) {
			t.Errorf("edited %q → %q: %v", edit.from, edit.to, err)
		}
	}
	// Rotation: a node trusting two keys takes a list by either.
	pub2, priv2 := fleet.GenerateKey()
	if _, err := ParseSignedList(signedFor(t, priv2, 3, listNow).Raw, []ed25519.PublicKey{pub, pub2}); err != nil {
		t.Errorf("the second trusted key: %v", err)
	}
}

// TestSignedListMalformed: lists that are not whole lists are refused as
// malformed, with what is wrong.
func TestSignedListMalformed(t *testing.T) {
	pub, priv := fleet.GenerateKey()
	keys := []ed25519.PublicKey{pub}
	good := string(signedFor(t, priv, 1, listNow, "example.com").Raw)
	cases := map[string]string{
		"empty":         "",
		"html":          "<html>not found</html>",
		"no signature":  good[:strings.Index(good, "signature")],
		"after sig":     good + "extra.example\n",
		"short sig":     strings.SplitAfter(good, "signature ")[0] + "abc AAAA\n",
		"other format":  strings.Replace(good, SignedListFormat, "coral-blacklist 2", 1),
		"bad signature": good[:len(good)-10] + "!!!!!!!!!\n",
	}
	for name, raw := range cases {
		if _, err := ParseSignedList([]byte(raw), keys); !errors.Is(err, ErrListFormat) {
			t.Errorf("%s: %v, want a format error", name, err)
		}
	}
	// Bodies a signer would never write, validly signed: refused whole.
	for name, body := range map[string]string{
		"bad entry":      "version 1\nsigned 2026-11-29T12:00:00Z\nexpires 2026-12-29T12:00:00Z\nbad..example\n",
		"no expires":     "version 1\nsigned 2026-11-29T12:00:00Z\nexample.com\n",
		"version 0":      "version 0\nsigned 2026-11-29T12:00:00Z\nexpires 2026-12-29T12:00:00Z\n",
		"two versions":   "version 1\nversion 2\nsigned 2026-11-29T12:00:00Z\nexpires 2026-12-29T12:00:00Z\n",
		"expires first":  "version 1\nsigned 2026-11-29T12:00:00Z\nexpires 2026-11-28T12:00:00Z\n",
		"entry too soon": "version 1\nexample.com\nsigned 2026-11-29T12:00:00Z\nexpires 2026-12-29T12:00:00Z\n",
	} {
		raw := signBody(t, priv, SignedListFormat+"\n"+body)
		if _, err := ParseSignedList(raw, keys); !errors.Is(err, ErrListFormat) {
			t.Errorf("%s: %v, want a format error", name, err)
		}
	}
	if _, err := SignList(priv, 0, listNow, listNow.Add(time.Hour), nil); err == nil {
		t.Error("SignList took version 0")
	}
	if _, err := SignList(priv, 1, listNow, listNow.Add(time.Hour), []Entry{{Name: "a..b"}}); err == nil {
		t.Error("SignList signed a bad entry")
	}
	if _, err := SignList(priv, 1, listNow, listNow.Add(time.Hour), []Entry{{Name: "a.example", Reason: "x\nevil.example"}}); err == nil {
		t.Error("SignList signed a reason of two lines")
	}
}

// signBody signs arbitrary text as a list's body.
func signBody(t *testing.T, key ed25519.PrivateKey, body string) []byte {
	t.Helper()
	sig, err := key.Sign(nil, []byte(body), &ed25519.Options{Context: signedListContext})
	if err != nil {
		t.Fatal(err)
	}
	return []byte(body + "signature " + KeyFingerprint(key.Public().(ed25519.PublicKey)) + " " + b64(sig) + "\n")
}

// TestSignedListTimes: a list signed beyond the clock skew in the future,
// or past its expiry, may not be installed.
func TestSignedListTimes(t *testing.T) {
	_, priv := fleet.GenerateKey()
	l := signedFor(t, priv, 1, listNow)
	for _, c := range []struct {
		now  time.Time
		want error
	}{
		{listNow, nil},
		{listNow.Add(-MaxClockSkew + time.Second), nil},
		{listNow.Add(-MaxClockSkew - time.Second), ErrListFuture},
		{listNow.Add(30*24*time.Hour - time.Second), nil},
		{listNow.Add(30 * 24 * time.Hour), ErrListExpired},
	} {
		if err := l.CheckTimes(c.now); !errors.Is(err, c.want) && (err != nil || c.want != nil) {
			t.Errorf("at %v: %v, want %v", c.now, err, c.want)
		}
	}
}

// listServer serves whatever list it holds, as a publisher's web server
// would, with entity tags; down makes it refuse connections' requests.
type listServer struct {
	*httptest.Server
	mu   sync.Mutex
	list []byte
	hits atomic.Int64
}

func newListServer(t *testing.T) *listServer {
	s := &listServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		b := s.list
		s.mu.Unlock()
		if b == nil {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "list", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *listServer) set(b []byte) {
	s.mu.Lock()
	s.list = append([]byte(nil), b...)
	s.mu.Unlock()
}

type fleetClock struct{ at atomic.Int64 }

func (c *fleetClock) now() time.Time        { return time.Unix(0, c.at.Load()).UTC() }
func (c *fleetClock) set(t time.Time)       { c.at.Store(t.UnixNano()) }
func newFleetClock(t time.Time) *fleetClock { c := &fleetClock{}; c.set(t); return c }

func newTestFleet(t *testing.T, pub ed25519.PublicKey, state string, clock *fleetClock, sources ...string) (*FleetList, *logRecorder) {
	t.Helper()
	logs := &logRecorder{}
	f, err := NewFleetList(FleetConfig{Keys: []ed25519.PublicKey{pub}, Sources: sources, Poll: time.Hour,
		StateFile: state, Logf: logs.logf, Now: clock.now, manual: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f, logs
}

// TestFleetListLifecycle: a node fetches a list, takes newer ones, refuses
// an older one (rollback), a forged one and an expired one while keeping
// the last good list, keeps it while the server is unreachable, and finds
// it in its state file after a restart.
func TestFleetListLifecycle(t *testing.T) {
	pub, priv := fleet.GenerateKey()
	_, forger := fleet.GenerateKey()
	srv := newListServer(t)
	state := filepath.Join(t.TempDir(), "state", "fleet-blacklist")
	clock := newFleetClock(listNow)
	f, logs := newTestFleet(t, pub, state, clock, srv.URL)
	ctx := context.Background()
	status := func() FleetStatus { return f.Status() }

	// No list yet: the server's 404 is unreachable, nothing blocked.
	f.FetchAll(ctx)
	if s := status(); s.Version != 0 || s.Counts[OutcomeUnreachable] == 0 || f.Blocked("example.com") {
		t.Fatalf("before any list: %+v", s)
	}

	v1 := signedFor(t, priv, 1, listNow, "example.com")
	srv.set(v1.Raw)
	f.FetchAll(ctx)
	if s := status(); s.Version != 1 || !f.Blocked("www.example.com") || s.Last.LastOutcome != OutcomeInstalled {
		t.Fatalf("v1: %+v", s)
	}
	if b, err := os.ReadFile(state); err != nil || !bytes.Equal(b, v1.Raw) {
		t.Fatalf("state file: %v", err)
	}
	// Unchanged: a conditional GET, answered 304.
	f.FetchAll(ctx)
	if s := status(); s.Last.LastOutcome != OutcomeUnchanged {
		t.Fatalf("unchanged: %+v", s)
	}

	v2 := signedFor(t, priv, 2, listNow.Add(time.Minute), "example.net")
	srv.set(v2.Raw)
	f.FetchAll(ctx)
	if s := status(); s.Version != 2 || f.Blocked("example.com") || !f.Blocked("example.net") {
		t.Fatalf("v2: %+v", s)
	}

	refused := func(what string, raw []byte, want Outcome) {
		t.Helper()
		srv.set(raw)
		f.FetchAll(ctx)
		s := status()
		if s.Version != 2 || s.Last.LastOutcome != want || !f.Blocked("example.net") || s.Last.LastError == "" {
			t.Fatalf("%s: %+v, want %s and version 2 kept", what, s, want)
		}
	}
	refused("rollback to v1", v1.Raw, OutcomeOlder)
	refused("same version, other content", signedFor(t, priv, 2, listNow, "other.example").Raw, OutcomeOlder)
	refused("forged v3", signedFor(t, forger, 3, listNow, "victim.example").Raw, OutcomeForged)
	tampered := bytes.Replace(signedFor(t, priv, 3, listNow, "example.net").Raw, []byte("example.net"), []byte("example.org"), 1)
	refused("tampered v3", tampered, OutcomeForged)
	refused("expired v3", func() []byte {
		l, err := SignList(priv, 3, listNow.Add(-48*time.Hour), listNow.Add(-time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		return l.Raw
	}(), OutcomeInvalid)
	refused("future v3", signedFor(t, priv, 3, listNow.Add(time.Hour)).Raw, OutcomeInvalid)
	refused("garbage", []byte("<html>oops</html>"), OutcomeInvalid)
	if got := strings.Join(logs.take(), "\n"); !strings.Contains(got, "forged") || !strings.Contains(got, "keeping version 2") {
		t.Errorf("the refusals are not logged as such:\n%s", got)
	}

	// The server goes away: the list stays, the outcome says so, and
	// the confirmation time stops.
	srv.set(v2.Raw)
	f.FetchAll(ctx)
	confirmed := status().Confirmed
	srv.Close()
	clock.set(listNow.Add(10 * time.Minute))
	f.FetchAll(ctx)
	s := status()
	if s.Version != 2 || s.Last.LastOutcome != OutcomeUnreachable || !s.Confirmed.Equal(confirmed) || !f.Blocked("example.net") {
		t.Fatalf("unreachable: %+v", s)
	}

	// Restart: the state file's list is in force before any fetch, even
	// past its expiry (it was good; nothing newer came).
	f.Close()
	clock.set(listNow.Add(60 * 24 * time.Hour))
	g, _ := newTestFleet(t, pub, state, clock)
	if l := g.List(); l == nil || l.Version != 2 || !g.Blocked("example.net") {
		t.Fatalf("after restart: %+v", g.Status())
	}
	// A state file the key does not verify is not taken.
	os.WriteFile(state, signedFor(t, forger, 9, listNow, "victim.example").Raw, 0o600)
	h, hlogs := newTestFleet(t, pub, state, clock)
	if h.List() != nil || !strings.Contains(strings.Join(hlogs.take(), "\n"), "not by a trusted publisher key") {
		t.Fatalf("a forged state file was taken: %+v", h.Status())
	}
}

// TestFleetListFromPeers: a node whose sources are other nodes' served
// lists takes the newest any of them has; a node installs through Install
// (the admin API's publish) and serves what it holds, with 304 for a
// client that has it.
func TestFleetListFromPeers(t *testing.T) {
	pub, priv := fleet.GenerateKey()
	clock := newFleetClock(listNow)
	a, _ := newTestFleet(t, pub, "", clock)
	b, _ := newTestFleet(t, pub, "", clock)
	srvA, srvB := httptest.NewServer(http.HandlerFunc(a.ServeList)), httptest.NewServer(http.HandlerFunc(b.ServeList))
	defer srvA.Close()
	defer srvB.Close()
	c, _ := newTestFleet(t, pub, "", clock, srvA.URL, srvB.URL)

	if o, err := a.Install(signedFor(t, priv, 4, listNow, "example.com").Raw, "admin"); o != OutcomeInstalled || err != nil {
		t.Fatalf("install v4 at a: %s %v", o, err)
	}
	if o, _ := b.Install(signedFor(t, priv, 5, listNow, "example.net").Raw, "admin"); o != OutcomeInstalled {
		t.Fatalf("install v5 at b: %s", o)
	}
	c.FetchAll(context.Background())
	s := c.Status()
	if s.Version != 5 || !c.Blocked("example.net") || s.Counts[OutcomeInstalled] == 0 || s.Counts[OutcomeOlder]+s.Counts[OutcomeInstalled] != 2 {
		t.Fatalf("c: %+v", s)
	}
	// Again: b answers 304, a's older list is refused again.
	c.FetchAll(context.Background())
	if s := c.Status(); s.Counts[OutcomeUnchanged] != 1 || s.Counts[OutcomeOlder] == 0 || s.Version != 5 {
		t.Fatalf("c again: %+v", s)
	}
	if o, _ := a.Install([]byte("junk"), "admin"); o != OutcomeInvalid {
		t.Errorf("junk through Install: %s", o)
	}
	resp, err := http.Get(srvA.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
		t.Fatalf("served list: %s %v", resp.Status, resp.Header)
	}
	empty, _ := newTestFleet(t, pub, "", clock)
	rec := httptest.NewRecorder()
	empty.ServeList(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("a node without a list serves %d", rec.Code)
	}
}

// TestFleetListConfig: a configuration without a key, or with a source
// that is not an http(s) URL, is refused.
func TestFleetListConfig(t *testing.T) {
	pub, _ := fleet.GenerateKey()
	if _, err := NewFleetList(FleetConfig{}); err == nil {
		t.Error("no key: no error")
	}
	for _, s := range []string{"ftp://x/list", "/etc/coral/list", "http://", "peer:8080"} {
		if _, err := NewFleetList(FleetConfig{Keys: []ed25519.PublicKey{pub}, Sources: []string{s}}); err == nil || !strings.Contains(err.Error(), "http") {
			t.Errorf("source %q: %v", s, err)
		}
	}
}

// TestPublisherKeyFiles: keygen writes the private key 0600 (and never
// overwrites it), the public key loads, and a public key file others may
// write is refused, as a network key file is.
func TestPublisherKeyFiles(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "blacklist.key"), filepath.Join(dir, "blacklist.pub")
	want, err := GeneratePublisherKey(priv, pub, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GeneratePublisherKey(priv, pub, "again"); err == nil {
		t.Error("keygen overwrote a key")
	}
	if st, _ := os.Stat(priv); st.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v", st.Mode().Perm())
	}
	k, err := LoadPublisherKey(priv)
	if err != nil || !k.Public().(ed25519.PublicKey).Equal(want) {
		t.Fatalf("private key: %v", err)
	}
	keys, err := LoadPublisherPublicKeys(pub)
	if err != nil || len(keys) != 1 || !keys[0].Equal(want) {
		t.Fatalf("public key: %v", err)
	}
	os.Chmod(pub, 0o666)
	if _, err := LoadPublisherPublicKeys(pub); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("a world-writable public key: %v", err)
	}
	os.Chmod(priv, 0o640)
	if _, err := LoadPublisherKey(priv); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a group-readable private key: %v", err)
	}
	if _, err := LoadPublisherPublicKeys(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "keygen") {
		t.Errorf("missing key: %v", err)
	}
	// The private key file is not a public key file, and the reverse.
	if _, err := LoadPublisherPublicKeys(priv); err == nil {
		t.Error("a private key file read as public keys")
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestBlacklistFileExpires: a local file's entries may expire too; of two
// entries for one name the longer-lasting wins, and a bad time is a bad
// line.
func TestBlacklistFileExpires(t *testing.T) {
	b, _, _ := loadBlacklist(t, "old.example expires=2000-01-01 # gone\n"+
		"new.example expires=2999-01-01T00:00:00Z\n"+
		"dup.example expires=2000-01-01\ndup.example\n"+
		"*.wild.example expires=2000-01-01\n")
	for host, want := range map[string]bool{"old.example": false, "www.new.example": true, "dup.example": true,
		"a.wild.example": false, "wild.example": false} {
		if b.Blocked(host) != want {
			t.Errorf("%s: blocked %v, want %v", host, !want, want)
		}
	}
	_, bad := parseBlacklist([]byte("x.example expires=soon\ny.example until=2030-01-01\n"))
	if len(bad) != 2 || !strings.Contains(bad[0], "RFC 3339") || !strings.Contains(bad[1], "one name per line") {
		t.Errorf("bad times: %q", bad)
	}
}
