package coralcaddy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/abuse"
)

// TestBlacklistCommand: keygen, then sign: the first list is version 1,
// the next one above it; a lower --version, a bad list line or a key
// others can read is refused; show verifies with the public key and
// refuses another publisher's.
func TestBlacklistCommand(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := blacklistKeygen(filepath.Join(dir, "publisher"), &out); err != nil {
		t.Fatal(err)
	}
	if err := blacklistKeygen(filepath.Join(dir, "publisher"), &out); err == nil {
		t.Fatal("keygen overwrote a key pair")
	}
	key, pub := filepath.Join(dir, "publisher", "blacklist.key"), filepath.Join(dir, "publisher", "blacklist.pub")
	list, signed := filepath.Join(dir, "blacklist.txt"), filepath.Join(dir, "blacklist.signed")
	os.WriteFile(list, []byte("example.com # asked\n*.example.org expires=2027-01-31\n"), 0o644)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for want := uint64(1); want <= 2; want++ {
		out.Reset()
		if err := blacklistSign(key, list, signed, 24*time.Hour, 0, now, &out); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(signed)
		keys, _ := abuse.LoadPublisherPublicKeys(pub)
		l, err := abuse.ParseSignedList(raw, keys)
		if err != nil || l.Version != want || len(l.Entries) != 2 || !l.Expires.Equal(now.Add(24*time.Hour)) {
			t.Fatalf("signed list %d: %+v %v", want, l, err)
		}
	}
	if err := blacklistSign(key, list, signed, time.Hour, 2, now, &out); err == nil || !strings.Contains(err.Error(), "version 2 already") {
		t.Errorf("--version 2 over version 2: %v", err)
	}
	os.WriteFile(list, []byte("ok.example\nbad..example\n"), 0o644)
	if err := blacklistSign(key, list, signed, time.Hour, 0, now, &out); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v", err)
	}
	out.Reset()
	if err := blacklistShow(signed, pub, &out); err != nil || !strings.Contains(out.String(), "version 2") || !strings.Contains(out.String(), "signature verified") ||
		!strings.Contains(out.String(), "example.com # asked") {
		t.Errorf("show: %v\n%s", err, out.String())
	}
	other := filepath.Join(dir, "other")
	if err := blacklistKeygen(other, &out); err != nil {
		t.Fatal(err)
	}
	if err := blacklistShow(signed, filepath.Join(other, "blacklist.pub"), &out); err == nil || !strings.Contains(err.Error(), "not by a trusted publisher key") {
		t.Errorf("show with another key: %v", err)
	}
	os.Chmod(key, 0o644)
	if err := blacklistSign(key, list, signed, time.Hour, 0, now, &out); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a readable private key: %v", err)
	}
}
