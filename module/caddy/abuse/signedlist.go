package abuse

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
)

// ---------------------------------------------------------------------
// The signed blacklist: one list an operator publishes for the whole
// fleet, signed with a publisher key the nodes trust.
//
// It is text, so that what a node enforces can be read (and diffed) as it
// is:
//
//	coral-blacklist 1
//	version 7
//	signed 2026-11-29T13:40:00Z
//	expires 2026-12-29T13:40:00Z
//	example.com                                  # asked not to be served (ticket 812)
//	*.example.org expires=2027-01-31T00:00:00Z   # names under example.org until the end of January
//	signature 5f0c3a81d2e4b697 BASE64
//
// The first line names the format; version, signed and expires follow,
// each once; then the entries, in the syntax of the local blacklist file
// (ParseEntry: a name, an optional expires=TIME, a comment as its
// reason), with blank and comment lines; the last line is the signature:
// the fingerprint of the publisher key (SHA-256 of the public key, first
// 8 bytes in hex) and the base64 of an Ed25519ctx signature, context
// "coral blacklist", over every byte before that line. Nothing may follow
// it but its newline.

// SignedListFormat is the first line of a signed list.
const SignedListFormat = "coral-blacklist 1"

// MaxSignedListBytes bounds a signed list, whether read from a file, an
// HTTP response or the admin API: about 200,000 entries with short
// reasons. The deployed CoralCDN's list was a few hundred names.
const MaxSignedListBytes = 8 << 20

// signedListContext is the Ed25519ctx context of a list's signature, so
// that no other signature by the same key (were it misused for something
// else) passes for a list.
const signedListContext = "coral blacklist"

// Labels of the publisher key files (coraldht/fleet's file format: text,
// # comments, a label and base64 per line).
const (
	LabelPublisherKey       = "blacklist-key"        // the private key's 32-byte seed: the operator's machine only
	LabelPublisherPublicKey = "blacklist-public-key" // one line per key a node trusts (two during a rotation)
)

// Errors of checking a signed list. Each also names what was wrong.
var (
	ErrListFormat    = errors.New("blacklist: malformed signed list")
	ErrListSignature = errors.New("blacklist: the signature is not by a trusted publisher key")
)

// SignedList is a list as its publisher signed it.
type SignedList struct {
	Version uint64
	Signed  time.Time // when it was signed
	Expires time.Time // after this a node installs it no more (one in force stays)
	Entries []Entry
	KeyID   string // the fingerprint of the key that signed it
	Raw     []byte // the list as published, signature line included
}

// KeyFingerprint names a publisher key: the first 8 bytes of SHA-256 of
// the public key, in hex.
func KeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// SignList writes and signs a list of entries. version must be above 0
// and expires after signed.
func SignList(key ed25519.PrivateKey, version uint64, signed, expires time.Time, entries []Entry) (*SignedList, error) {
	switch {
	case version == 0:
		return nil, errors.New("blacklist: version must be 1 or more")
	case !expires.After(signed):
		return nil, fmt.Errorf("blacklist: expires (%v) is not after signed (%v)", expires.UTC(), signed.UTC())
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nversion %d\nsigned %s\nexpires %s\n", SignedListFormat, version,
		signed.UTC().Format(time.RFC3339), expires.UTC().Format(time.RFC3339))
	for _, e := range entries {
		// Each entry goes through the parser a node uses, so that
		// nothing is signed that a node would refuse.
		if strings.ContainsAny(e.Reason, "\n\r") {
			return nil, fmt.Errorf("blacklist: entry %s: a reason is one line", e.Name)
		}
		line := e.String()
		if _, ok, problem := ParseEntry(line); !ok || problem != "" {
			return nil, fmt.Errorf("blacklist: entry %q: %s", line, problem)
		}
		b.WriteString(line + "\n")
	}
	pub := key.Public().(ed25519.PublicKey)
	sig, err := key.Sign(nil, b.Bytes(), &ed25519.Options{Context: signedListContext})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&b, "signature %s %s\n", KeyFingerprint(pub), base64.StdEncoding.EncodeToString(sig))
	return ParseSignedList(b.Bytes(), []ed25519.PublicKey{pub})
}

// ParseSignedList checks that one of keys signed raw and decodes it. The
// signature is checked before anything else is read. It does not judge
// the list's times or version against a node's: CheckTimes and the
// FleetList do.
func ParseSignedList(raw []byte, keys []ed25519.PublicKey) (*SignedList, error) {
	body, keyID, sig, err := splitSignature(raw)
	if err != nil {
		return nil, err
	}
	trusted := false
	for _, k := range keys {
		if ed25519.VerifyWithOptions(k, body, sig, &ed25519.Options{Context: signedListContext}) == nil {
			trusted = true
			break
		}
	}
	if !trusted {
		return nil, fmt.Errorf("%w (it names key %s)", ErrListSignature, keyID)
	}
	l, err := decodeListBody(body)
	if err != nil {
		return nil, err
	}
	l.KeyID, l.Raw = keyID, bytes.Clone(raw)
	return l, nil
}

// DecodeSignedList decodes a list without checking its signature: for
// showing one (`caddy coral-blacklist show`), never for enforcing it.
func DecodeSignedList(raw []byte) (*SignedList, error) {
	body, keyID, _, err := splitSignature(raw)
	if err != nil {
		return nil, err
	}
	l, err := decodeListBody(body)
	if err != nil {
		return nil, err
	}
	l.KeyID, l.Raw = keyID, bytes.Clone(raw)
	return l, nil
}

// splitSignature finds the signature line: the last line, after the body.
func splitSignature(raw []byte) (body []byte, keyID string, sig []byte, err error) {
	if len(raw) > MaxSignedListBytes {
		return nil, "", nil, fmt.Errorf("%w: larger than %d bytes", ErrListFormat, MaxSignedListBytes)
	}
	if !bytes.HasPrefix(raw, []byte(SignedListFormat+"\n")) {
		return nil, "", nil, fmt.Errorf("%w: the first line is not %q", ErrListFormat, SignedListFormat)
	}
	text := bytes.TrimSuffix(raw, []byte("\n"))
	i := bytes.LastIndexByte(text, '\n')
	last := string(text[i+1:])
	f := strings.Fields(last)
	if len(f) != 3 || f[0] != "signature" || last != strings.Join(f, " ") {
		return nil, "", nil, fmt.Errorf("%w: the last line is not \"signature KEY-FINGERPRINT BASE64\"", ErrListFormat)
	}
	sig, err = base64.StdEncoding.Strict().DecodeString(f[2])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, "", nil, fmt.Errorf("%w: the signature is not %d bytes of base64", ErrListFormat, ed25519.SignatureSize)
	}
	return raw[:i+1], f[1], sig, nil
}

// decodeListBody reads the header and entries of a list (before its
// signature line). Any bad line fails the whole list: a signed list is
// taken whole or not at all, and the signing command refuses what a node
// would.
func decodeListBody(body []byte) (*SignedList, error) {
	l := &SignedList{}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	header := map[string]bool{}
	bad := func(n int, format string, args ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrListFormat, n+1, fmt.Sprintf(format, args...))
	}
	for n, line := range lines[1:] {
		n++
		key, val, _ := strings.Cut(line, " ")
		if (key == "version" || key == "signed" || key == "expires") && len(l.Entries) == 0 {
			if header[key] {
				return nil, bad(n, "a second %s", key)
			}
			header[key] = true
			var err error
			switch key {
			case "version":
				l.Version, err = strconv.ParseUint(val, 10, 64)
				if err == nil && l.Version == 0 {
					err = errors.New("0")
				}
			case "signed":
				l.Signed, err = time.Parse(time.RFC3339, val)
			case "expires":
				l.Expires, err = time.Parse(time.RFC3339, val)
			}
			if err != nil {
				return nil, bad(n, "%s %q: %v", key, val, err)
			}
			continue
		}
		if len(header) < 3 && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			return nil, bad(n, "an entry before version, signed and expires")
		}
		e, ok, problem := ParseEntry(line)
		if problem != "" {
			return nil, bad(n, "%q: %s", line, problem)
		}
		if ok {
			l.Entries = append(l.Entries, e)
		}
	}
	if len(header) < 3 {
		return nil, fmt.Errorf("%w: version, signed and expires are required", ErrListFormat)
	}
	if !l.Expires.After(l.Signed) {
		return nil, fmt.Errorf("%w: expires %v is not after signed %v", ErrListFormat, l.Expires.UTC(), l.Signed.UTC())
	}
	l.Signed, l.Expires = l.Signed.UTC(), l.Expires.UTC()
	return l, nil
}

// MaxClockSkew is how far in the future a list's signing time may be:
// the publisher's clock and a node's differ.
const MaxClockSkew = 5 * time.Minute

// Errors of CheckTimes.
var (
	ErrListExpired = errors.New("blacklist: the list has expired")
	ErrListFuture  = errors.New("blacklist: the list is signed in the future")
)

// CheckTimes checks that the list may be installed at now: signed no
// later than MaxClockSkew from now, and not expired.
func (l *SignedList) CheckTimes(now time.Time) error {
	switch {
	case l.Signed.After(now.Add(MaxClockSkew)):
		return fmt.Errorf("%w (signed %s; is a clock wrong?)", ErrListFuture, l.Signed.Format(time.RFC3339))
	case !now.Before(l.Expires):
		return fmt.Errorf("%w (expired %s; sign it again)", ErrListExpired, l.Expires.Format(time.RFC3339))
	}
	return nil
}

// blockSet is the set the list's entries make.
func (l *SignedList) blockSet() *blockSet {
	s := newBlockSet()
	for _, e := range l.Entries {
		s.addEntry(e)
	}
	return s
}

// ---------------------------------------------------------------------
// Publisher key files.

// maxKeyFileBytes bounds a publisher key file.
const maxKeyFileBytes = 64 << 10

// GeneratePublisherKey writes a new publisher key pair: private to
// privPath (mode 0600, refusing to overwrite), public to pubPath (0644).
func GeneratePublisherKey(privPath, pubPath string, comment string) (ed25519.PublicKey, error) {
	pub, priv := fleet.GenerateKey()
	fp := KeyFingerprint(pub)
	if err := fleet.WriteNewFile(privPath, 0o600, fleet.Marshal(LabelPublisherKey,
		[]string{comment, "blacklist publisher key " + fp + ": keep it on the operator's machine, never on a node"}, priv.Seed())); err != nil {
		return nil, fmt.Errorf("blacklist: %w", err)
	}
	if err := fleet.WriteNewFile(pubPath, 0o644, fleet.Marshal(LabelPublisherPublicKey,
		[]string{comment, "blacklist publisher key " + fp + ": copy to every node (fleet_blacklist's key)"}, pub)); err != nil {
		return nil, fmt.Errorf("blacklist: %w", err)
	}
	return pub, nil
}

// LoadPublisherKey reads a publisher's private key. Like the fleet key
// (coral-fleet), the file must be readable by its owner alone.
func LoadPublisherKey(path string) (ed25519.PrivateKey, error) {
	k, err := fleet.LoadPrivateKey(path, LabelPublisherKey)
	if err != nil {
		return nil, fmt.Errorf("blacklist: publisher key: %w", err)
	}
	return k, nil
}

// LoadPublisherPublicKeys reads the publisher public keys a node trusts.
// Like a network key file, it must not be writable by group or others: a
// key anyone could replace would let them sign lists.
func LoadPublisherPublicKeys(path string) ([]ed25519.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("blacklist: publisher key file %s does not exist; create a key pair with: caddy coral-blacklist keygen DIR", path)
		}
		return nil, fmt.Errorf("blacklist: publisher key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("blacklist: publisher key: %w", err)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("blacklist: publisher key %s is not a regular file", path)
	case st.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("blacklist: publisher key %s is writable by group or others (mode %v); run chmod 0644 %s", path, st.Mode().Perm(), path)
	}
	text, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("blacklist: publisher key: %w", err)
	}
	if len(text) > maxKeyFileBytes {
		return nil, fmt.Errorf("blacklist: publisher key %s is larger than %d bytes; is it the right file?", path, maxKeyFileBytes)
	}
	keys, err := ParsePublisherPublicKeys(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// ParsePublisherPublicKeys reads a publisher public key file's text.
func ParsePublisherPublicKeys(text []byte) ([]ed25519.PublicKey, error) {
	keys, err := fleet.ParsePublicKeysLabelled(text, LabelPublisherPublicKey)
	if err != nil {
		return nil, fmt.Errorf("blacklist: %w", err)
	}
	return keys, nil
}
