package fleet

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Files: text, lines starting with # are comments, every other line is
// a label and the base64 of a binary value:
//
//	# fleet example.net, issued 2026-01-01
//	certificate AQAAAAAAAAAB…
//
// The labels say what a file holds, so a certificate is never read as a
// key: "fleet-key" and "node-key" (the 32-byte Ed25519 seed of a private
// key), "fleet-public-key" (one line per key a node trusts: two during a
// rotation of the fleet key), "certificate" and "revocation-list".

// Labels of the values in fleet files.
const (
	LabelFleetKey       = "fleet-key"
	LabelNodeKey        = "node-key"
	LabelFleetPublicKey = "fleet-public-key"
	LabelCertificate    = "certificate"
	LabelRevocationList = "revocation-list"
)

// maxFileBytes bounds what a fleet file may hold (a revocation list of
// MaxRevoked serials in base64, with room for comments).
const maxFileBytes = 128 << 10

// GenerateKey returns a new Ed25519 key pair, for a fleet or a node.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic("fleet: crypto/rand: " + err.Error())
	}
	return pub, priv
}

// Marshal writes values under label as a fleet file, after comment
// lines.
func Marshal(label string, comments []string, values ...[]byte) []byte {
	var b bytes.Buffer
	for _, c := range comments {
		for _, line := range strings.Split(c, "\n") {
			fmt.Fprintf(&b, "# %s\n", line)
		}
	}
	for _, v := range values {
		fmt.Fprintf(&b, "%s %s\n", label, base64.StdEncoding.EncodeToString(v))
	}
	return b.Bytes()
}

// Parse reads the values under label from a fleet file's text; lines of
// another label are an error.
func Parse(text []byte, label string) ([][]byte, error) {
	if len(text) > maxFileBytes {
		return nil, fmt.Errorf("fleet: %s file larger than %d bytes", label, maxFileBytes)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), maxFileBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		got, value, _ := strings.Cut(line, " ")
		if got != label {
			return nil, fmt.Errorf("fleet: found %q where a %s was expected", got, label)
		}
		v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
		if err != nil || len(v) == 0 {
			return nil, fmt.Errorf("fleet: %s: no base64 value (%v)", label, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fleet: %s: %v", label, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("fleet: no %s in the file", label)
	}
	return out, nil
}

// readFile reads a fleet file, at most maxFileBytes. A private key's
// file must be readable by its owner alone.
func readFile(path string, private bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("fleet: %s does not exist: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("fleet: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("fleet: %s is not a regular file", path)
	}
	if private && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("fleet: private key %s is accessible to group or others (mode %v); run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	return b, nil
}

func one(path, label string, private bool) ([]byte, error) {
	text, err := readFile(path, private)
	if err != nil {
		return nil, err
	}
	vs, err := Parse(text, label)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(vs) != 1 {
		return nil, fmt.Errorf("fleet: %s holds %d values; want one %s", path, len(vs), label)
	}
	return vs[0], nil
}

// WriteNewFile writes a file that must not exist yet (a key is never
// overwritten), with mode.
func WriteNewFile(path string, mode os.FileMode, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadPrivateKey reads a private key (a fleet-key or node-key file).
func LoadPrivateKey(path, label string) (ed25519.PrivateKey, error) {
	seed, err := one(path, label, true)
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("fleet: %s: key of %d bytes; want %d", path, len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// ParsePublicKeys reads the fleet public keys of a fleet-public-key file's
// text.
func ParsePublicKeys(text []byte) ([]ed25519.PublicKey, error) {
	return ParsePublicKeysLabelled(text, LabelFleetPublicKey)
}

// ParsePublicKeysLabelled reads Ed25519 public keys under label: for
// other keys kept in fleet files (the blacklist publisher's).
func ParsePublicKeysLabelled(text []byte, label string) ([]ed25519.PublicKey, error) {
	vs, err := Parse(text, label)
	if err != nil {
		return nil, err
	}
	var keys []ed25519.PublicKey
	for _, v := range vs {
		if len(v) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("fleet: public key of %d bytes; want %d", len(v), ed25519.PublicKeySize)
		}
		keys = append(keys, ed25519.PublicKey(v))
	}
	return keys, nil
}

// LoadPublicKeys reads a fleet-public-key file.
func LoadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	text, err := readFile(path, false)
	if err != nil {
		return nil, err
	}
	keys, err := ParsePublicKeys(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// LoadCertificate reads a certificate file.
func LoadCertificate(path string) (*Certificate, error) {
	raw, err := one(path, LabelCertificate, false)
	if err != nil {
		return nil, err
	}
	return ParseCertificate(raw)
}

// ParseRevocationListText reads a revocation-list file's text and checks
// its signature.
func ParseRevocationListText(text []byte, fleetKeys []ed25519.PublicKey) (*RevocationList, error) {
	vs, err := Parse(text, LabelRevocationList)
	if err != nil {
		return nil, err
	}
	if len(vs) != 1 {
		return nil, fmt.Errorf("fleet: %d revocation lists in one file", len(vs))
	}
	return ParseRevocationList(vs[0], fleetKeys)
}

// LoadRevocationList reads a revocation-list file and checks its
// signature.
func LoadRevocationList(path string, fleetKeys []ed25519.PublicKey) (*RevocationList, error) {
	text, err := readFile(path, false)
	if err != nil {
		return nil, err
	}
	l, err := ParseRevocationListText(text, fleetKeys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}
