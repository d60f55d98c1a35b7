package coraldht

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

const (
	// tagLen is the length of the truncated HMAC-SHA256 tag on every
	// datagram: 128 bits, ample against forgery for datagrams that live
	// seconds. The wire format reserves room for it.
	tagLen = wire.TagLen

	// KeySize is the length of a network key in bytes.
	KeySize = 32

	// keyFileMaxBytes bounds what LoadKeyFile reads.
	keyFileMaxBytes = 4096
)

// KeyHelp tells an operator how to create a network key file.
const KeyHelp = "create one with: umask 077; head -c 32 /dev/urandom | base64 > network.key " +
	"(any 32 or more random bytes, base64 or hex), and give every node of the network the same file"

// Key is a network key: every node of one Coral network holds the same key
// and tags every datagram with it. The zero Key is not usable.
type Key struct {
	mac  [sha256.Size]byte // HMAC key derived from the secret
	fp   string            // Fingerprint
	pool *sync.Pool
}

// fingerprintLen is how many bytes of SHA-256 of the derived key a
// fingerprint shows: enough to tell a keyring's keys apart, and a hash of
// the derived key, never of the secret, so it reveals nothing usable.
const fingerprintLen = 8

// Fingerprint names the key without revealing it: the first 8 bytes of
// SHA-256 of the derived MAC key, in hex. Status pages, metrics and the
// keyring's admin calls name keys by it.
func (k *Key) Fingerprint() string { return k.fp }

// NewKey derives a network key from secret, which must hold at least KeySize
// random bytes.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < KeySize {
		return nil, fmt.Errorf("coraldht: network key has %d bytes; need at least %d", len(secret), KeySize)
	}
	// Derive the HMAC key so a secret used elsewhere (or a later protocol
	// version) never shares MAC keys with this one.
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("coral dht v1 datagram tag"))
	k := &Key{}
	copy(k.mac[:], h.Sum(nil))
	sum := sha256.Sum256(k.mac[:])
	k.fp = hex.EncodeToString(sum[:fingerprintLen])
	k.pool = &sync.Pool{New: func() any { return hmac.New(sha256.New, k.mac[:]) }}
	return k, nil
}

// insecureLoopbackKey is used by nodes without a key. It is public, so it
// authenticates nothing; nodes use it only on loopback.
var insecureLoopbackKey = func() *Key {
	k, err := NewKey([]byte("coral insecure loopback-only development key, never on a network"))
	if err != nil {
		panic(err)
	}
	return k
}()

// GenerateKey returns a new random secret of KeySize bytes, base64-encoded
// with a trailing newline: the contents of a key file.
func GenerateKey() []byte {
	secret := make([]byte, KeySize)
	if _, err := rand.Read(secret); err != nil {
		panic("coraldht: crypto/rand: " + err.Error())
	}
	return []byte(base64.StdEncoding.EncodeToString(secret) + "\n")
}

// WriteKeyFile writes a new random key to path with mode 0600. It refuses to
// overwrite an existing file.
func WriteKeyFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("coraldht: write key file: %w", err)
	}
	if _, err := f.Write(GenerateKey()); err != nil {
		f.Close()
		return fmt.Errorf("coraldht: write key file: %w", err)
	}
	return f.Close()
}

// ParseKey reads a network key from a key file's contents (see
// LoadKeyFile), for keys that arrive another way, such as an admin call.
func ParseKey(text []byte) (*Key, error) {
	if len(text) > keyFileMaxBytes {
		return nil, fmt.Errorf("coraldht: network key is larger than %d bytes", keyFileMaxBytes)
	}
	secret, err := parseKeyText(text)
	if err != nil {
		return nil, fmt.Errorf("coraldht: network key: %v; %s", err, KeyHelp)
	}
	return NewKey(secret)
}

// LoadKeyFile reads a network key. The file holds the secret as base64 or
// hex text (lines starting with # are comments). It must not be writable by
// group or others.
func LoadKeyFile(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("coraldht: network key file %s does not exist; %s", path, KeyHelp)
		}
		return nil, fmt.Errorf("coraldht: network key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("coraldht: network key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("coraldht: network key %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("coraldht: network key %s is writable by group or others (mode %v); run chmod 0640 %s (root:coral 0640, as the packages install it: the service reads it through its group)", path, st.Mode().Perm(), path)
	}
	data := make([]byte, keyFileMaxBytes+1)
	// One Read may return less than the file holds; ReadFull does not.
	n, err := io.ReadFull(f, data)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("coraldht: network key: %w", err)
	}
	if n > keyFileMaxBytes {
		return nil, fmt.Errorf("coraldht: network key %s is larger than %d bytes; is it the right file?", path, keyFileMaxBytes)
	}
	secret, err := parseKeyText(data[:n])
	if err != nil {
		return nil, fmt.Errorf("coraldht: network key %s: %v; %s", path, err, KeyHelp)
	}
	return NewKey(secret)
}

// parseKeyText extracts the secret from a key file's text.
func parseKeyText(text []byte) ([]byte, error) {
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		body.WriteString(line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	s := body.String()
	if s == "" {
		return nil, errors.New("file holds no key")
	}
	// Hex first, but only when it yields a whole key: text such as "AAAA…"
	// is valid hex and valid base64, and only the base64 reading is long
	// enough to be a key. Every node parses a file the same way.
	var secret []byte
	if b, err := hex.DecodeString(s); err == nil && len(b) >= KeySize {
		secret = b
	} else if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		secret = b
	} else if b, err := base64.RawStdEncoding.DecodeString(s); err == nil {
		secret = b
	} else if b, err := base64.URLEncoding.DecodeString(s); err == nil {
		secret = b
	} else if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		secret = b
	} else {
		return nil, errors.New("key is neither hex nor base64")
	}
	if len(secret) < KeySize {
		return nil, fmt.Errorf("key has %d bytes; need at least %d", len(secret), KeySize)
	}
	return secret, nil
}

func (k *Key) tag(msg []byte, out []byte) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	var sum [sha256.Size]byte
	out = append(out, h.Sum(sum[:0])[:tagLen]...)
	k.pool.Put(h)
	return out
}

// seal appends the tag of msg to msg.
func (k *Key) seal(msg []byte) []byte { return k.tag(msg, msg) }

// open checks the tag at the end of pkt and returns the message before it.
func (k *Key) open(pkt []byte) ([]byte, bool) {
	if len(pkt) < tagLen {
		return nil, false
	}
	msg, got := pkt[:len(pkt)-tagLen], pkt[len(pkt)-tagLen:]
	var buf [tagLen]byte
	want := k.tag(msg, buf[:0])
	return msg, hmac.Equal(got, want)
}

// replayFilter remembers, per sender, the timestamps accepted within the
// reorder window. A datagram is fresh when its timestamp is within the clock
// skew of now, after the filter started (less the reorder window), not older
// than the sender's newest by more than the window, and not seen before.
// Senders quiet for twice the skew are forgotten: their old datagrams can no
// longer pass the freshness test.
//
// Every claimed sender takes a window, so the windows are a boundedMap:
// at most maxSenders, and at most maxSenders/64 (at least 64) from one source prefix
// (the datagram's source, /24 or /48), evicting the least recently used.
// A window evicted while its datagrams could still pass the freshness
// test leaves its newest timestamp (at most now) in a slot chosen by a
// keyed hash of the sender: a window created later for a sender hashing
// there refuses everything up to it, so evicting never lets a captured
// datagram through twice.
type replayFilter struct {
	mu         sync.Mutex
	skew       int64
	window     int64
	floor      int64
	maxSenders int
	maxPerSend int
	senders    *boundedMap[ID, netip.Prefix, *senderWindow]
	evicted    [evictedSlots]int64
	seed       maphash.Seed
	now        int64 // of the check in progress, for onEvict
}

// evictedSlots is how many floors evicted windows leave behind.
const evictedSlots = 1024

// replaySendersPerPrefixShare: one source prefix may hold 1/64 of the
// windows (1024 by default).
const replaySendersPerPrefixShare = 64

type senderWindow struct {
	newest   int64
	floor    int64 // everything at or below is refused
	lastSeen int64
	seen     map[int64]struct{}
	order    []int64 // arrival order, for pruning
}

func newReplayFilter(skew, window int64, start int64) *replayFilter {
	return &replayFilter{
		skew:       skew,
		window:     window,
		floor:      start - window,
		maxSenders: 1 << 16,
		maxPerSend: 8192,
		seed:       maphash.MakeSeed(),
	}
}

func (f *replayFilter) slot(sender ID) *int64 {
	return &f.evicted[maphash.Comparable(f.seed, sender)%evictedSlots]
}

// windowsLocked returns the windows, sized to maxSenders (which tests
// lower).
func (f *replayFilter) windowsLocked() *boundedMap[ID, netip.Prefix, *senderWindow] {
	if f.senders == nil || f.senders.max != f.maxSenders {
		f.senders = newBoundedMap[ID, netip.Prefix, *senderWindow](f.maxSenders, max(f.maxSenders/replaySendersPerPrefixShare, minPerPrefix))
		f.senders.onEvict = func(id ID, sw *senderWindow) {
			if sw.lastSeen >= f.now-2*f.skew {
				if s := f.slot(id); *s < min(sw.newest, f.now) {
					*s = min(sw.newest, f.now)
				}
			}
		}
	}
	return f.senders
}

// check decides whether a datagram from sender, arriving from source
// prefix src, stamped ts, is fresh at now, and records it if so.
func (f *replayFilter) check(sender ID, src netip.Prefix, ts, now int64) DropReason {
	if ts < now-f.skew || ts > now+f.skew || ts < f.floor {
		return DropStale
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
	windows := f.windowsLocked()
	sw, ok := windows.get(sender)
	if !ok {
		floor := max(ts-f.window, *f.slot(sender))
		if ts <= floor {
			return DropReplay
		}
		sw = &senderWindow{newest: ts, floor: floor, seen: make(map[int64]struct{})}
		windows.put(sender, src, sw)
	} else if ts <= sw.floor || ts < sw.newest-f.window {
		return DropReplay
	} else if _, dup := sw.seen[ts]; dup {
		return DropReplay
	} else {
		windows.touch(sender)
	}
	sw.lastSeen = now
	sw.seen[ts] = struct{}{}
	sw.order = append(sw.order, ts)
	if ts > sw.newest {
		sw.newest = ts
	}
	for len(sw.order) > 0 {
		old := sw.order[0]
		tooOld := old < sw.newest-f.window
		tooMany := len(sw.order) > f.maxPerSend
		if !tooOld && !tooMany {
			break
		}
		sw.order = sw.order[1:]
		delete(sw.seen, old)
		if tooMany && old > sw.floor {
			// Forgetting a stamp inside the window: refuse everything up
			// to it rather than risk accepting it twice.
			sw.floor = old
		}
	}
	return dropNone
}

// prune forgets senders that have been quiet for twice the skew, least
// recently seen first.
func (f *replayFilter) prune(now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	windows := f.windowsLocked()
	for {
		id, sw, ok := windows.oldest()
		if !ok || sw.lastSeen >= now-2*f.skew {
			return
		}
		windows.remove(id)
	}
}

// len is how many sender windows the filter holds.
func (f *replayFilter) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.windowsLocked().len()
}
