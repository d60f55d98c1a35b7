package coraldht

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

func authSecret(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func authMustKey(t testing.TB, secret []byte) *Key {
	t.Helper()
	k, err := NewKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAuthNewKey(t *testing.T) {
	t.Run("short secrets rejected", func(t *testing.T) {
		for _, n := range []int{0, 1, 16, KeySize - 1} {
			if k, err := NewKey(make([]byte, n)); err == nil || k != nil {
				t.Errorf("NewKey(%d bytes) = %v, %v; want an error", n, k, err)
			}
		}
	})
	t.Run("long secrets accepted", func(t *testing.T) {
		for _, n := range []int{KeySize, KeySize + 1, 256} {
			if _, err := NewKey(make([]byte, n)); err != nil {
				t.Errorf("NewKey(%d bytes): %v", n, err)
			}
		}
	})
	t.Run("different secrets tag differently", func(t *testing.T) {
		msg := []byte("the same message")
		a, b := authMustKey(t, authSecret(1)), authMustKey(t, authSecret(2))
		ta, tb := a.seal(append([]byte(nil), msg...)), b.seal(append([]byte(nil), msg...))
		if bytes.Equal(ta, tb) {
			t.Fatal("two secrets give the same tag")
		}
		// The same secret gives the same tag, from a separate Key too.
		if tc := authMustKey(t, authSecret(1)).seal(append([]byte(nil), msg...)); !bytes.Equal(ta, tc) {
			t.Fatal("one secret gives two tags")
		}
	})
	t.Run("tag is as PROTOCOL.md specifies", func(t *testing.T) {
		secret := []byte("0123456789abcdef0123456789abcdef-spec")
		msg := []byte{0xC0, 0x2A, 1, 1, 0}
		h := hmac.New(sha256.New, secret)
		h.Write([]byte("coral dht v1 datagram tag"))
		h = hmac.New(sha256.New, h.Sum(nil))
		h.Write(msg)
		want := append(append([]byte(nil), msg...), h.Sum(nil)[:16]...)
		if got := authMustKey(t, secret).seal(append([]byte(nil), msg...)); !bytes.Equal(got, want) {
			t.Fatalf("seal = %x, want %x", got, want)
		}
	})
}

func TestAuthSealOpen(t *testing.T) {
	k := authMustKey(t, authSecret(7))
	msg := wireEncode(t, wirePing())
	sealed := k.seal(append([]byte(nil), msg...))
	if len(sealed) != len(msg)+tagLen || !bytes.Equal(sealed[:len(msg)], msg) {
		t.Fatalf("seal changed the message or added %d bytes", len(sealed)-len(msg))
	}

	t.Run("valid opens", func(t *testing.T) {
		body, ok := k.open(sealed)
		if !ok || !bytes.Equal(body, msg) {
			t.Fatalf("open = %x, %v", body, ok)
		}
		empty := k.seal(nil)
		if body, ok := k.open(empty); !ok || len(body) != 0 {
			t.Fatalf("open of a sealed empty message = %x, %v", body, ok)
		}
	})
	t.Run("every flipped bit fails", func(t *testing.T) {
		for i := 0; i < len(sealed)*8; i++ {
			p := append([]byte(nil), sealed...)
			p[i/8] ^= 1 << (i % 8)
			if _, ok := k.open(p); ok {
				t.Fatalf("open accepted the datagram with bit %d flipped", i)
			}
		}
	})
	t.Run("every truncation fails", func(t *testing.T) {
		for n := 0; n < len(sealed); n++ {
			if _, ok := k.open(sealed[:n]); ok {
				t.Fatalf("open accepted the first %d of %d bytes", n, len(sealed))
			}
			if _, ok := k.open(sealed[len(sealed)-n:]); ok {
				t.Fatalf("open accepted the last %d of %d bytes", n, len(sealed))
			}
		}
	})
	t.Run("extension fails", func(t *testing.T) {
		if _, ok := k.open(append(append([]byte(nil), sealed...), 0)); ok {
			t.Fatal("open accepted a datagram with a byte appended")
		}
	})
	t.Run("wrong key fails", func(t *testing.T) {
		for _, other := range []*Key{authMustKey(t, authSecret(8)), testKey, insecureLoopbackKey} {
			if _, ok := other.open(sealed); ok {
				t.Fatal("a different key opened the datagram")
			}
		}
	})
	t.Run("concurrent use", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					m := fmt.Appendf(nil, "goroutine %d message %d", g, i)
					if body, ok := k.open(k.seal(m)); !ok || !bytes.Equal(body, m) {
						errs <- string(m)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for m := range errs {
			t.Errorf("concurrent seal/open failed for %q", m)
		}
	})
}

func TestAuthParseKeyText(t *testing.T) {
	secret := make([]byte, KeySize)
	for i := range secret {
		secret[i] = byte(i*37 + 11)
	}
	// Bytes whose base64 uses the characters that differ between the
	// standard and URL alphabets (+/ versus -_).
	urlish := bytes.Repeat([]byte{0xFB, 0xEF, 0xBE, 0xFF}, 8)
	long := bytes.Repeat(secret, 2)
	wrapped := base64.StdEncoding.EncodeToString(long)
	wrapped = wrapped[:76] + "\n" + wrapped[76:] + "\n"

	ok := []struct {
		name, text string
		want       []byte
	}{
		{"base64 std", base64.StdEncoding.EncodeToString(secret) + "\n", secret},
		{"base64 std without newline", base64.StdEncoding.EncodeToString(secret), secret},
		{"base64 raw std", base64.RawStdEncoding.EncodeToString(secret), secret},
		{"base64 url", base64.URLEncoding.EncodeToString(urlish), urlish},
		{"base64 raw url", base64.RawURLEncoding.EncodeToString(urlish) + "\n", urlish},
		{"base64 std of url-ish bytes", base64.StdEncoding.EncodeToString(urlish), urlish},
		{"hex lower", hex.EncodeToString(secret), secret},
		{"hex upper", strings.ToUpper(hex.EncodeToString(secret)) + "\n", secret},
		{"longer than KeySize", hex.EncodeToString(long), long},
		{"base64 wrapped over lines", wrapped, long},
		{"comments and blank lines", "# Coral network key\n\n   \n# generated by hand\n" +
			base64.StdEncoding.EncodeToString(secret) + "\n\n# end\n", secret},
		{"surrounding whitespace", " \t" + hex.EncodeToString(secret) + " \t\n", secret},
		{"CRLF line ends", "# key\r\n" + base64.StdEncoding.EncodeToString(secret) + "\r\n", secret},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseKeyText([]byte(c.text))
			if err != nil {
				t.Fatalf("parseKeyText(%q): %v", c.text, err)
			}
			if !bytes.Equal(got, c.want) {
				t.Fatalf("parseKeyText(%q) = %x, want %x", c.text, got, c.want)
			}
		})
	}

	bad := []struct {
		name, text, errText string
	}{
		{"empty", "", "no key"},
		{"blank lines", "\n \n\t\n", "no key"},
		{"only comments", "# a key goes here\n#\n", "no key"},
		{"too short base64", base64.StdEncoding.EncodeToString(secret[:KeySize-1]), "need at least 32"},
		{"too short hex", hex.EncodeToString(secret[:16]), "need at least 32"},
		{"garbage", "this is not a key!", "neither hex nor base64"},
		{"base64 with a bad character", "*" + base64.StdEncoding.EncodeToString(secret)[1:], "neither hex nor base64"},
		{"comment mid-line is not a comment", hex.EncodeToString(secret) + " # key", "neither hex nor base64"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseKeyText([]byte(c.text))
			if err == nil {
				t.Fatalf("parseKeyText(%q) = %x; want an error", c.text, got)
			}
			if !strings.Contains(err.Error(), c.errText) {
				t.Fatalf("error %q does not mention %q", err, c.errText)
			}
		})
	}
}

// authSameKey reports whether two keys tag alike.
func authSameKey(a, b *Key) bool {
	m := []byte("probe")
	return bytes.Equal(a.seal(append([]byte(nil), m...)), b.seal(append([]byte(nil), m...)))
}

func TestAuthLoadKeyFile(t *testing.T) {
	secret := authSecret(0x5A)
	text := "# test key\n" + base64.StdEncoding.EncodeToString(secret) + "\n"
	want := authMustKey(t, secret)
	write := func(t *testing.T, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "network.key")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is subject to umask
			t.Fatal(err)
		}
		return p
	}

	for _, mode := range []os.FileMode{0o600, 0o400, 0o640, 0o644} {
		t.Run(fmt.Sprintf("mode %04o loads", mode), func(t *testing.T) {
			k, err := LoadKeyFile(write(t, text, mode))
			if err != nil {
				t.Fatal(err)
			}
			if !authSameKey(k, want) {
				t.Fatal("loaded key differs from NewKey(secret)")
			}
		})
	}
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666, 0o622, 0o660} {
		t.Run(fmt.Sprintf("mode %04o refused", mode), func(t *testing.T) {
			p := write(t, text, mode)
			k, err := LoadKeyFile(p)
			if err == nil {
				t.Fatalf("loaded a key from a file with mode %04o", mode)
			}
			// The hint is a chmod that fixes it and keeps the mode the
			// packages and docs/operations.md give the key, root:coral 0640:
			// the services read it through their group.
			m := regexp.MustCompile(`run chmod ([0-7]{3,4}) (\S+)`).FindStringSubmatch(err.Error())
			if k != nil || m == nil || m[2] != p {
				t.Fatalf("error %q does not tell how to fix it (run chmod MODE %s)", err, p)
			}
			hint, _ := strconv.ParseUint(m[1], 8, 32)
			if os.FileMode(hint)&0o040 == 0 || os.FileMode(hint)&0o022 != 0 {
				t.Fatalf("the hint chmod %s would take the group's read (the documented mode is 0640) or leave it writable", m[1])
			}
			if err := os.Chmod(p, os.FileMode(hint)); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadKeyFile(p); err != nil {
				t.Fatalf("after the hint's chmod %s: %v", m[1], err)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "absent.key")
		_, err := LoadKeyFile(p)
		if err == nil || !strings.Contains(err.Error(), KeyHelp) || !strings.Contains(err.Error(), p) {
			t.Fatalf("error %v should name the file and include KeyHelp", err)
		}
		if !strings.Contains(KeyHelp, "head -c 32 /dev/urandom") {
			t.Errorf("KeyHelp %q does not say how to create a key", KeyHelp)
		}
	})
	t.Run("directory", func(t *testing.T) {
		d := t.TempDir()
		if err := os.Chmod(d, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := LoadKeyFile(d)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("LoadKeyFile(directory) = %v; want a not-a-regular-file error", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		big := "# " + strings.Repeat("x", keyFileMaxBytes) + "\n" + base64.StdEncoding.EncodeToString(secret) + "\n"
		_, err := LoadKeyFile(write(t, big, 0o600))
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("LoadKeyFile(%d bytes) = %v; want a too-large error", len(big), err)
		}
	})
	t.Run("exactly the size limit loads", func(t *testing.T) {
		body := base64.StdEncoding.EncodeToString(secret) + "\n"
		pad := "#" + strings.Repeat("x", keyFileMaxBytes-len(body)-2) + "\n"
		k, err := LoadKeyFile(write(t, pad+body, 0o600))
		if err != nil || len(pad+body) != keyFileMaxBytes {
			t.Fatalf("LoadKeyFile(%d bytes): %v", len(pad+body), err)
		}
		if !authSameKey(k, want) {
			t.Fatal("wrong key")
		}
	})
	for _, c := range []struct{ name, content, errText string }{
		{"garbage", "not a key at all\n", "neither hex nor base64"},
		{"too short", base64.StdEncoding.EncodeToString(secret[:20]) + "\n", "need at least"},
		{"empty", "", "no key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadKeyFile(write(t, c.content, 0o600))
			if err == nil || !strings.Contains(err.Error(), c.errText) || !strings.Contains(err.Error(), KeyHelp) {
				t.Fatalf("error %v should say %q and include KeyHelp", err, c.errText)
			}
		})
	}
	t.Run("WriteKeyFile", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "network.key")
		if err := WriteKeyFile(p); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("WriteKeyFile made mode %04o, want 0600", st.Mode().Perm())
		}
		first, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		secret, err := parseKeyText(first)
		if err != nil || len(secret) != KeySize {
			t.Fatalf("written key parses as %d bytes, %v", len(secret), err)
		}
		k, err := LoadKeyFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !authSameKey(k, authMustKey(t, secret)) {
			t.Fatal("LoadKeyFile does not read back what WriteKeyFile wrote")
		}
		if err := WriteKeyFile(p); err == nil {
			t.Fatal("WriteKeyFile overwrote an existing key")
		}
		if again, _ := os.ReadFile(p); !bytes.Equal(again, first) {
			t.Fatal("the refused WriteKeyFile changed the file")
		}
		q := filepath.Join(dir, "other.key")
		if err := WriteKeyFile(q); err != nil {
			t.Fatal(err)
		}
		if other, _ := os.ReadFile(q); bytes.Equal(other, first) {
			t.Fatal("two generated keys are equal")
		}
	})
}

func TestAuthReplayFilter(t *testing.T) {
	const (
		skew   = int64(30 * time.Second)
		window = int64(2 * time.Second)
		ms     = int64(time.Millisecond)
	)
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	now := start + int64(time.Minute)
	a, b := KeyFor("sender a"), KeyFor("sender b")

	type step struct {
		sender ID
		ts     int64
		want   DropReason
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"fresh accepted", []step{{a, now, dropNone}, {b, now, dropNone}}},
		{"exact duplicate", []step{{a, now, dropNone}, {a, now, DropReplay}, {a, now, DropReplay}}},
		{"duplicate of an older stamp", []step{{a, now - 5*ms, dropNone}, {a, now, dropNone}, {a, now - 5*ms, DropReplay}}},
		{"one sender's stamp does not block another", []step{{a, now, dropNone}, {b, now, dropNone}}},
		{"older than newest minus window", []step{{a, now, dropNone}, {a, now - window - 1, DropReplay}, {a, now - 10*window, DropReplay}}},
		{"reordered within window accepted once", []step{
			{a, now, dropNone}, {a, now - window + 1, dropNone}, {a, now - time.Second.Nanoseconds(), dropNone},
			{a, now - window + 1, DropReplay}, {a, now - time.Second.Nanoseconds(), DropReplay}, {a, now, DropReplay}}},
		{"newer stamps move the window", []step{
			{a, now - 10*ms, dropNone}, {a, now + time.Second.Nanoseconds(), dropNone},
			{a, now - 10*ms - window, DropReplay}, {a, now, dropNone}}},
		{"stale past", []step{{a, now - skew - 1, DropStale}, {a, now - skew, dropNone}}},
		{"stale future", []step{{a, now + skew + 1, DropStale}, {a, now + skew, dropNone}}},
		{"stale does not count as seen", []step{{a, now + skew + 1, DropStale}, {a, now + skew + 1, DropStale}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newReplayFilter(skew, window, start)
			for i, s := range c.steps {
				if got := f.check(s.sender, replayTestPrefix, s.ts, now); got != s.want {
					t.Fatalf("step %d: check(ts=now%+dns) = %q, want %q", i, s.ts-now, got, s.want)
				}
			}
		})
	}

	t.Run("before start minus window", func(t *testing.T) {
		f := newReplayFilter(skew, window, start)
		// Just after start, stamps from before start-window are stale even
		// though within the skew: they may have been accepted by the
		// previous incarnation of this node.
		if got := f.check(a, replayTestPrefix, start-window-1, start+ms); got != DropStale {
			t.Fatalf("stamp before start-window: %q, want stale", got)
		}
		if got := f.check(b, replayTestPrefix, start-window, start+ms); got != dropNone {
			t.Fatalf("stamp at start-window: %q, want accepted", got)
		}
	})

	t.Run("prune forgets quiet senders", func(t *testing.T) {
		f := newReplayFilter(skew, window, start)
		f.check(a, replayTestPrefix, now, now)
		later := now + 2*skew
		f.check(b, replayTestPrefix, later, later)
		f.prune(later)
		if f.senders.len() != 2 {
			t.Fatalf("prune at exactly 2×skew forgot a sender: %d left", f.senders.len())
		}
		f.prune(later + 1)
		if _, ok := f.senders.get(a); ok || f.senders.len() != 1 {
			t.Fatalf("prune kept the quiet sender (%d senders)", f.senders.len())
		}
		if _, ok := f.senders.get(b); !ok {
			t.Fatal("prune forgot the recent sender")
		}
		// a's old stamp is stale by now, so forgetting it opens no hole.
		if got := f.check(a, replayTestPrefix, now, later+1); got != DropStale {
			t.Fatalf("a's old stamp after pruning: %q, want stale", got)
		}
		// b is still remembered.
		if got := f.check(b, replayTestPrefix, later, later+1); got != DropReplay {
			t.Fatalf("b's stamp after pruning: %q, want replay", got)
		}
	})

	t.Run("per-sender cap raises the floor", func(t *testing.T) {
		f := newReplayFilter(skew, window, start)
		f.maxPerSend = 4
		stamps := []int64{now, now + 10*ms, now + 20*ms, now + 30*ms, now + 40*ms}
		for _, ts := range stamps {
			if got := f.check(a, replayTestPrefix, ts, now); got != dropNone {
				t.Fatalf("fresh stamp %d: %q", ts-now, got)
			}
		}
		sw, _ := f.senders.get(a)
		if len(sw.order) != 4 || len(sw.seen) != 4 || sw.floor != stamps[0] {
			t.Fatalf("after 5 stamps with cap 4: %d kept, %d seen, floor now%+d; want 4, 4, floor at the first stamp",
				len(sw.order), len(sw.seen), sw.floor-now)
		}
		// The forgotten stamp, and anything at or below it, is refused.
		for _, ts := range []int64{stamps[0], stamps[0] - ms} {
			if got := f.check(a, replayTestPrefix, ts, now); got != DropReplay {
				t.Fatalf("stamp now%+d at or below the raised floor: %q, want replay", ts-now, got)
			}
		}
		// A fresh stamp above the floor is accepted and pushes it up again.
		if got := f.check(a, replayTestPrefix, stamps[0]+5*ms, now); got != dropNone {
			t.Fatalf("fresh stamp above the floor: %q", got)
		}
		if got := f.check(a, replayTestPrefix, stamps[1], now); got != DropReplay || sw.floor != stamps[1] {
			t.Fatalf("stamp at the new floor: %q (floor now%+d), want replay", got, sw.floor-now)
		}
		// Without the cap, the same stamp below the first would be fine:
		// the refusal above is the cap's doing.
		g := newReplayFilter(skew, window, start)
		for _, ts := range stamps {
			g.check(a, replayTestPrefix, ts, now)
		}
		if got := g.check(a, replayTestPrefix, stamps[0]-ms, now); got != dropNone {
			t.Fatalf("uncapped filter refused a fresh in-window stamp: %q", got)
		}
	})

	t.Run("sender cap", func(t *testing.T) {
		f := newReplayFilter(skew, window, start)
		f.maxSenders = 3
		// Time moves on, as it does between new senders: an evicted
		// window leaves its newest stamp (at most the clock then) in one
		// of evictedSlots slots, and a later sender hashing there is
		// refused up to it. With every stamp at one instant a new sender
		// shared an evicted one's slot, and was refused, in about 2% of
		// runs (the slot hash is seeded at random).
		for i := range int64(10) {
			at := now + i*ms
			if got := f.check(KeyFor(fmt.Sprint(i)), replayTestPrefix, at, at); got != dropNone {
				t.Fatalf("sender %d: %q", i, got)
			}
			if f.senders.len() > 3 {
				t.Fatalf("%d senders tracked; cap 3", f.senders.len())
			}
		}
	})

	t.Run("concurrent checks accept each stamp once", func(t *testing.T) {
		f := newReplayFilter(skew, window, start)
		var mu sync.Mutex
		accepted := map[int64]int{}
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int64(0); i < 100; i++ {
					ts := now + i*ms
					if f.check(a, replayTestPrefix, ts, now) == dropNone {
						mu.Lock()
						accepted[ts]++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		for ts, n := range accepted {
			if n != 1 {
				t.Errorf("stamp now%+d accepted %d times", ts-now, n)
			}
		}
	})
}

// authEnv is an attacker endpoint on a test network, aimed at one node.
// It speaks like a current node: it reads extensions, and echoes the
// address cookie the target granted it (handshake), so its requests come
// from a proven source and are answered in full.
type authEnv struct {
	t      *testing.T
	tn     *testNet
	target *Node
	atk    *memnet.Transport
	self   Contact
	seq    int64
	reqID  uint64
	echo   uint64
}

const authAttackerIndex = 1000

func newAuthEnv(t *testing.T) *authEnv { return newAuthEnvWith(t, nil) }

// newAuthEnvWith is newAuthEnv with the nodes' configuration adjusted.
func newAuthEnvWith(t *testing.T, tweak func(i int, c *Config)) *authEnv {
	tn := newTestNet(t, 2, memnet.Config{}, tweak)
	atk, err := tn.net.Listen(memAddr(authAttackerIndex))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { atk.Close() })
	synctest.Wait()
	e := &authEnv{t: t, tn: tn, target: tn.nodes[0], atk: atk,
		self: Contact{ID: NodeIDFor(atk.LocalAddr()), Addr: atk.LocalAddr(), Services: wire.CapExtensions}, reqID: 1000}
	e.handshake()
	return e
}

// handshake is a first contact: a ping without a cookie, whose reply
// (truncated: the attacker's source is not proven yet) grants one. The
// target also pings the attacker's address to prove it; that ping goes
// unanswered, as the attacker only listens.
func (e *authEnv) handshake() {
	e.t.Helper()
	for _, p := range e.send(e.ping()) {
		body, ok := testKey.open(p)
		if !ok {
			e.t.Fatal("handshake: a datagram from the target does not authenticate")
		}
		if m, err := wire.Decode(body); err == nil && m.Response && m.Grant != 0 {
			e.echo = m.Grant
		}
	}
	if e.echo == 0 {
		e.t.Fatal("handshake: no cookie granted")
	}
	synctest.Wait()
}

// stamp returns a fresh timestamp near the bubble's clock.
func (e *authEnv) stamp() int64 {
	e.seq++
	return time.Now().UnixNano() + e.seq*int64(time.Microsecond)
}

// message returns a valid header of the given type and direction from the
// attacker, with a fresh stamp.
func (e *authEnv) message(typ wire.Type, response bool) *wire.Message {
	e.reqID++
	m := &wire.Message{Type: typ, Response: response, ReqID: e.reqID, Timestamp: e.stamp(), Sender: e.self,
		Recipient: e.target.ID(), Clusters: []ClusterInfo{{Level: 0, Created: time.Now().Truncate(time.Second)}},
		Ext: true}
	if !response {
		m.Echo = e.echo
	}
	return m
}

func (e *authEnv) seal(m *wire.Message, k *Key) []byte {
	e.t.Helper()
	return k.seal(wireEncode(e.t, m))
}

func (e *authEnv) ping() []byte { return e.seal(e.message(wire.Ping, false), testKey) }

type authTraffic struct {
	drops                 DropCounts
	reqIn, repIn, repOut  uint64
	reqOut, refused       uint64
	netSent, netDelivered uint64
}

func (e *authEnv) traffic() authTraffic {
	s := e.target.Stats()
	ns := e.tn.net.Stats()
	return authTraffic{drops: s.Drops, reqIn: s.RequestsIn.Total(), repIn: s.RepliesIn.Total(),
		repOut: s.RepliesOut.Total(), reqOut: s.RequestsOut.Total(), refused: s.Refused,
		netSent: ns.Sent, netDelivered: ns.Delivered}
}

// send delivers pkts to the target one at a time and returns what the
// attacker received.
func (e *authEnv) send(pkts ...[]byte) [][]byte {
	e.t.Helper()
	for _, p := range pkts {
		if err := e.atk.WriteTo(p, e.target.Addr()); err != nil {
			e.t.Fatal(err)
		}
		synctest.Wait()
	}
	var got [][]byte
	for {
		buf := make([]byte, MaxDatagram+1)
		n, _, ok := e.atk.TryReadFrom(buf)
		if !ok {
			return got
		}
		got = append(got, buf[:n])
	}
}

// expectDropped sends pkts and checks that the target answered none of them,
// sent nothing at all, and counted each under the expected reason.
func (e *authEnv) expectDropped(bump func(d *DropCounts), pkts ...[]byte) {
	e.t.Helper()
	before := e.traffic()
	if replies := e.send(pkts...); len(replies) != 0 {
		e.t.Fatalf("target answered %d of %d bad datagrams", len(replies), len(pkts))
	}
	after := e.traffic()
	want := before
	want.netSent += uint64(len(pkts)) // the attacker's own datagrams
	want.netDelivered += uint64(len(pkts))
	bump(&want.drops)
	if after != want {
		e.t.Fatalf("after %d bad datagrams:\n got %+v\nwant %+v", len(pkts), after, want)
	}
}

// expectReply sends pkt and checks that it is answered exactly once, with a
// reply the attacker can authenticate and parse.
func (e *authEnv) expectReply(pkt []byte) *wire.Message {
	e.t.Helper()
	before := e.traffic()
	replies := e.send(pkt)
	if len(replies) != 1 {
		e.t.Fatalf("a valid request got %d replies; want 1", len(replies))
	}
	body, ok := testKey.open(replies[0])
	if !ok {
		e.t.Fatal("reply does not authenticate")
	}
	r, err := wire.Decode(body)
	if err != nil {
		e.t.Fatalf("reply does not parse: %v", err)
	}
	req, _ := wire.Decode(pkt[:len(pkt)-tagLen])
	if !r.Response || r.Type != req.Type || r.ReqID != req.ReqID || publicContact(r.Sender) != e.target.Contact() {
		e.t.Fatalf("reply %+v does not answer %+v", r, req)
	}
	after := e.traffic()
	if after.drops != before.drops || after.reqIn != before.reqIn+1 || after.repOut != before.repOut+1 {
		e.t.Fatalf("valid request: traffic went from %+v to %+v", before, after)
	}
	return r
}

func TestAuthEndToEnd(t *testing.T) {
	skew := DefaultConfig().MaxClockSkew
	cases := []struct {
		name string
		run  func(e *authEnv)
	}{
		{"valid request gets one reply", func(e *authEnv) {
			e.expectReply(e.ping())
			m := e.message(wire.FindNode, false)
			m.Target = KeyFor("x")
			r := e.expectReply(e.seal(m, testKey))
			if r.Status != wire.StatusOK || len(r.Nodes) == 0 {
				e.t.Errorf("find_node reply: status %d, %d contacts", r.Status, len(r.Nodes))
			}
		}},
		{"wrong key", func(e *authEnv) {
			e.expectDropped(func(d *DropCounts) { d.BadAuth += 2 },
				e.seal(e.message(wire.Ping, false), authMustKey(e.t, authSecret(9))),
				e.seal(e.message(wire.Ping, false), insecureLoopbackKey))
		}},
		{"one flipped bit", func(e *authEnv) {
			var pkts [][]byte
			for _, bit := range []int{0, 3*8 + 1, wireOffTimestamp*8 + 63, 300, -1, -tagLen * 8} {
				p := e.ping()
				if bit < 0 {
					bit += len(p) * 8
				}
				p[bit/8] ^= 1 << (bit % 8)
				pkts = append(pkts, p)
			}
			e.expectDropped(func(d *DropCounts) { d.BadAuth += uint64(len(pkts)) }, pkts...)
		}},
		{"truncated", func(e *authEnv) {
			p := e.ping()
			e.expectDropped(func(d *DropCounts) { d.BadAuth += 4 }, p[:len(p)-1], p[:len(p)-tagLen], p[:tagLen], p[:0])
			// The untruncated datagram is still good: the drops above did
			// not consume its stamp.
			e.expectReply(p)
		}},
		{"oversize", func(e *authEnv) {
			// Padded with an extension of a later revision (which
			// receivers keep unread) to n bytes in all.
			padded := func() []byte {
				m := e.message(wire.Ping, false)
				pad := MaxDatagram - tagLen - len(wireEncode(e.t, m)) - 3
				m.Unknown = append([]byte{9, byte(pad >> 8), byte(pad)}, make([]byte, pad)...)
				return wireEncode(e.t, m)
			}
			// Authentic, but 1201 bytes: refused before the tag is checked.
			p := testKey.seal(append(padded(), 0))
			if len(p) != MaxDatagram+1 {
				e.t.Fatalf("built %d bytes", len(p))
			}
			e.expectDropped(func(d *DropCounts) { d.Oversize += 2 }, p, make([]byte, 4000))
			// At exactly 1200 bytes it passes every check.
			e.expectReply(testKey.seal(padded()))
		}},
		{"replay of a captured datagram", func(e *authEnv) {
			p := e.ping()
			e.expectReply(p)
			e.expectDropped(func(d *DropCounts) { d.Replay += 2 }, p, p)
		}},
		{"stale timestamp", func(e *authEnv) {
			past, future := e.message(wire.Ping, false), e.message(wire.Ping, false)
			past.Timestamp = time.Now().Add(-skew - time.Second).UnixNano()
			future.Timestamp = time.Now().Add(skew + time.Second).UnixNano()
			e.expectDropped(func(d *DropCounts) { d.Stale += 2 }, e.seal(past, testKey), e.seal(future, testKey))
			// Just inside the skew is fine.
			future.Timestamp = time.Now().Add(skew - time.Second).UnixNano()
			e.expectReply(e.seal(future, testKey))
		}},
		{"stamp from before the node started", func(e *authEnv) {
			m := e.message(wire.Ping, false)
			m.Timestamp = e.target.replay.floor - 1
			if m.Timestamp < time.Now().Add(-skew).UnixNano() {
				e.t.Fatalf("test precondition: node started more than %v ago", skew)
			}
			e.expectDropped(func(d *DropCounts) { d.Stale++ }, e.seal(m, testKey))
		}},
		{"unsolicited reply", func(e *authEnv) {
			r := e.message(wire.Ping, true)
			f := e.message(wire.FindNode, true)
			f.Nodes = []Contact{e.self}
			e.expectDropped(func(d *DropCounts) { d.Unsolicited += 2 }, e.seal(r, testKey), e.seal(f, testKey))
		}},
		{"authentic but malformed", func(e *authEnv) {
			bad := wireEncode(e.t, e.message(wire.Ping, false))
			bad[wireOffVersion] = 2
			e.expectDropped(func(d *DropCounts) { d.Malformed += 2 }, testKey.seal(bad), testKey.seal([]byte("hello")))
		}},
		{"captured for one node, replayed to another", func(e *authEnv) {
			// An authentic request addressed to another node is refused:
			// replaying traffic seen elsewhere reflects nothing.
			m := e.message(wire.FindNode, false)
			m.Recipient = e.tn.nodes[1].ID()
			m.Target = KeyFor("x")
			e.expectDropped(func(d *DropCounts) { d.Misdirected++ }, e.seal(m, testKey))
			// The same request addressed to the target is answered.
			m.Recipient = e.target.ID()
			m.Timestamp = e.stamp()
			e.expectReply(e.seal(m, testKey))
		}},
		{"forged as the target itself", func(e *authEnv) {
			m := e.message(wire.Ping, false)
			m.Sender = e.target.Contact()
			e.expectDropped(func(d *DropCounts) { d.Self++ }, e.seal(m, testKey))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c.run(newAuthEnv(t))
			})
		})
	}
}

// TestAuthDropsNeverReply sends one of each bad datagram to every node of a
// small network at once and checks that the network as a whole sends nothing
// in response.
func TestAuthDropsNeverReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnv(t)
		e.tn.add(2, nil)
		synctest.Wait()
		p := e.ping()
		if got := e.send(p); len(got) != 1 { // capture a valid datagram, answered once
			t.Fatalf("valid ping got %d replies", len(got))
		}
		flipped := e.ping()
		flipped[10] ^= 0x10
		bad := [][]byte{
			e.seal(e.message(wire.Ping, false), authMustKey(t, authSecret(3))),
			make([]byte, MaxDatagram+1),
			flipped,
			e.seal(e.message(wire.Ping, true), testKey),
		}
		before := e.tn.net.Stats()
		if err := e.atk.WriteTo(p, e.target.Addr()); err != nil { // the replay
			t.Fatal(err)
		}
		for _, n := range e.tn.nodes {
			for _, b := range bad {
				if err := e.atk.WriteTo(b, n.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		synctest.Wait()
		after := e.tn.net.Stats()
		attacker := uint64(1 + len(bad)*len(e.tn.nodes))
		if sent := after.Sent - before.Sent; sent != attacker {
			t.Fatalf("network carried %d datagrams; the attacker sent %d and nodes must send none", sent, attacker)
		}
		var drops uint64
		for _, n := range e.tn.nodes {
			d := n.Stats().Drops
			drops += d.BadAuth + d.Oversize + d.Unsolicited + d.Replay + d.Misdirected
		}
		if drops != attacker {
			t.Fatalf("nodes counted %d drops; want %d", drops, attacker)
		}
		if got := e.send(); len(got) != 0 {
			t.Fatalf("attacker received %d datagrams", len(got))
		}
	})
}

func TestAuthKeylessNode(t *testing.T) {
	cases := []struct {
		name      string
		listen    string
		advertise string
		wantErr   bool
	}{
		{"non-loopback memnet address", "10.0.0.1:4000", "", true},
		{"loopback", "127.0.0.3:4000", "", false},
		{"loopback IPv6", "[::1]:4000", "", false},
		{"loopback advertising a public address", "127.0.0.3:4000", "192.0.2.7:4000", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mn := memnet.New(memnet.Config{})
				tr, err := mn.Listen(netip.MustParseAddrPort(c.listen))
				if err != nil {
					t.Fatal(err)
				}
				cfg := DefaultConfig()
				if c.advertise != "" {
					cfg.Advertise = netip.MustParseAddrPort(c.advertise)
				}
				n, err := NewNode(cfg, tr)
				if !c.wantErr {
					if err != nil {
						t.Fatalf("keyless node on %s: %v", c.listen, err)
					}
					n.Close()
					return
				}
				tr.Close()
				if err == nil {
					n.Close()
					t.Fatalf("keyless node started on %s", c.listen)
				}
				if !errors.Is(err, ErrNoKey) {
					t.Fatalf("err = %v, want ErrNoKey", err)
				}
				if !strings.Contains(err.Error(), KeyHelp) {
					t.Fatalf("error %q does not say how to create a key", err)
				}
			})
		})
	}

	t.Run("keyless loopback nodes talk only to each other", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mn := memnet.New(memnet.Config{Latency: func(_, _ netip.AddrPort) time.Duration { return time.Millisecond }})
			start := func(addr string, key *Key) *Node {
				tr, err := mn.Listen(netip.MustParseAddrPort(addr))
				if err != nil {
					t.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.Key = key
				n, err := NewNode(cfg, tr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.Close() })
				return n
			}
			a, b := start("127.0.0.2:4000", nil), start("127.0.0.3:4000", nil)
			keyed := start("127.0.0.4:4000", testKey)
			ctx := context.Background()
			if _, err := a.Ping(ctx, b.Addr()); err != nil {
				t.Fatalf("keyless loopback ping: %v", err)
			}
			if _, err := a.Ping(ctx, keyed.Addr()); !errors.Is(err, ErrTimeout) {
				t.Fatalf("keyless node pinging a keyed one: %v, want ErrTimeout", err)
			}
			if d := keyed.Stats().Drops; d.BadAuth == 0 {
				t.Fatalf("keyed node accepted the development key: %+v", d)
			}
			if s := keyed.Stats(); s.RepliesOut.Total() != 0 {
				t.Fatalf("keyed node answered %d datagrams under the development key", s.RepliesOut.Total())
			}
		})
	})
}

// replayTestPrefix is the source prefix of the replay filter's tests.
var replayTestPrefix = netip.MustParsePrefix("192.0.2.0/24")
