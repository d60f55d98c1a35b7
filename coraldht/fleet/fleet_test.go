package fleet

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	t0          = time.Unix(1_780_000_000, 0)
	fleetPub, _ = GenerateKey()
)

func testFleet(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	return GenerateKey()
}

func TestCertificate(t *testing.T) {
	pub, priv := testFleet(t)
	nodePub, _ := GenerateKey()
	c, err := Issue(priv, nodePub, 42, t0, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Raw) != CertificateLen || c.Serial != 42 || !c.PublicKey.Equal(nodePub) || !c.NotBefore.Equal(t0) {
		t.Fatalf("certificate %+v", c)
	}
	keys := []ed25519.PublicKey{fleetPub, pub}
	if err := c.Check(keys, t0.Add(time.Hour)); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	if err := c.Check(keys, t0.Add(25*time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("after its period: %v", err)
	}
	if !c.Valid(t0.Add(-time.Minute), time.Minute) || c.Valid(t0.Add(-time.Minute-time.Second), time.Minute) {
		t.Fatal("slack is not applied as documented")
	}
	if err := c.Check([]ed25519.PublicKey{fleetPub}, t0.Add(time.Hour)); !errors.Is(err, ErrSignature) {
		t.Fatalf("another fleet's key: %v", err)
	}
	for i := range c.Raw {
		bad := bytes.Clone(c.Raw)
		bad[i] ^= 0x10
		if p, err := ParseCertificate(bad); err == nil && p.Signed(keys) {
			t.Fatalf("a certificate with byte %d changed still verifies", i)
		}
	}
	if _, err := ParseCertificate(c.Raw[:CertificateLen-1]); !errors.Is(err, ErrFormat) {
		t.Fatalf("short certificate: %v", err)
	}
	if _, err := Issue(priv, nodePub, 1, t0, t0); err == nil {
		t.Fatal("issued a certificate valid for no time")
	}
}

func TestRevocationList(t *testing.T) {
	pub, priv := testFleet(t)
	l, err := NewRevocationList(priv, 7, t0, []uint64{9, 3, 9, 5})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRevocationList(l.Raw, []ed25519.PublicKey{pub})
	if err != nil {
		t.Fatal(err)
	}
	if got.Number != 7 || !got.Issued.Equal(t0) || len(got.Serials) != 3 || !got.Revoked(5) || got.Revoked(4) {
		t.Fatalf("list %+v", got)
	}
	if (*RevocationList)(nil).Revoked(1) {
		t.Fatal("no list revokes something")
	}
	if _, err := ParseRevocationList(l.Raw, []ed25519.PublicKey{fleetPub}); !errors.Is(err, ErrSignature) {
		t.Fatalf("list of another fleet: %v", err)
	}
	for i := range l.Raw {
		bad := bytes.Clone(l.Raw)
		bad[i] ^= 1
		if _, err := ParseRevocationList(bad, []ed25519.PublicKey{pub}); err == nil {
			t.Fatalf("a list with byte %d changed still parses", i)
		}
	}
	empty, err := NewRevocationList(priv, 1, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseRevocationList(empty.Raw, []ed25519.PublicKey{pub}); err != nil || len(got.Serials) != 0 {
		t.Fatalf("empty list: %+v %v", got, err)
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	pub, priv := testFleet(t)
	write := func(name string, mode os.FileMode, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("fleet.key", 0o600, Marshal(LabelFleetKey, []string{"fleet example"}, priv.Seed()))
	if got, err := LoadPrivateKey(keyFile, LabelFleetKey); err != nil || !got.Equal(priv) {
		t.Fatalf("fleet key: %v", err)
	}
	if _, err := LoadPrivateKey(write("open.key", 0o644, Marshal(LabelFleetKey, nil, priv.Seed())), LabelFleetKey); err == nil ||
		!strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a private key readable by others: %v", err)
	}
	if _, err := LoadPrivateKey(keyFile, LabelNodeKey); err == nil || !strings.Contains(err.Error(), "fleet-key") {
		t.Fatalf("a fleet key read as a node key: %v", err)
	}
	other, _ := GenerateKey()
	pubFile := write("fleet.pub", 0o644, Marshal(LabelFleetPublicKey, []string{"two keys: a rotation"}, pub, other))
	if keys, err := LoadPublicKeys(pubFile); err != nil || len(keys) != 2 || !keys[0].Equal(pub) {
		t.Fatalf("public keys: %v %v", keys, err)
	}
	nodePub, _ := GenerateKey()
	c, _ := Issue(priv, nodePub, 1, t0, t0.Add(time.Hour))
	certFile := write("node.cert", 0o644, Marshal(LabelCertificate, []string{"node n1"}, c.Raw))
	if got, err := LoadCertificate(certFile); err != nil || got.Serial != 1 {
		t.Fatalf("certificate: %+v %v", got, err)
	}
	l, _ := NewRevocationList(priv, 2, t0, []uint64{1})
	listFile := write("revoked.list", 0o644, Marshal(LabelRevocationList, []string{"serial 1: node n1"}, l.Raw))
	if got, err := LoadRevocationList(listFile, []ed25519.PublicKey{pub}); err != nil || !got.Revoked(1) {
		t.Fatalf("list: %+v %v", got, err)
	}
	for _, bad := range []string{"", "# only comments\n", "certificate !!!\n", "certificate\n"} {
		if _, err := Parse([]byte(bad), LabelCertificate); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if _, err := Parse(bytes.Repeat([]byte("#"), maxFileBytes+1), LabelCertificate); err == nil {
		t.Error("an oversized file accepted")
	}
}

// FuzzParseFleetFile: whatever a fleet file holds, parsing it as any
// kind returns values or an error, never panics, and what parses
// re-encodes to itself.
func FuzzParseFleetFile(f *testing.F) {
	pub, priv := GenerateKey()
	c, _ := Issue(priv, pub, 3, t0, t0.Add(time.Hour))
	l, _ := NewRevocationList(priv, 4, t0, []uint64{1, 2})
	f.Add(Marshal(LabelCertificate, []string{"c"}, c.Raw))
	f.Add(Marshal(LabelRevocationList, nil, l.Raw))
	f.Add(Marshal(LabelFleetPublicKey, nil, pub, pub))
	f.Add([]byte("certificate AQ==\n# x\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		for _, label := range []string{LabelCertificate, LabelRevocationList, LabelFleetPublicKey} {
			vs, err := Parse(text, label)
			if err != nil {
				continue
			}
			for _, v := range vs {
				if cert, err := ParseCertificate(v); err == nil && !bytes.Equal(cert.Raw, v) {
					t.Fatal("certificate does not round-trip")
				}
				if list, err := ParseRevocationList(v, []ed25519.PublicKey{pub}); err == nil && !bytes.Equal(list.Raw, v) {
					t.Fatal("list does not round-trip")
				}
			}
			_, _ = ParsePublicKeys(text)
		}
	})
}
