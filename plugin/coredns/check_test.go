package coral

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coraldht"
)

// TestCheckCorefile (issue 22, defect 7): the config check reads coral
// blocks and their key files, finds unknown directives and bad settings,
// and binds nothing: it passes while the node's port is in use.
func TestCheckCorefile(t *testing.T) {
	const listen = "127.0.140.50:4000"
	busy, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(listen)))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	key := filepath.Join(t.TempDir(), "network.key")
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	good := "nyucd.test:53 {\n\tbind 127.0.140.50\n\tcoral nyucd.test {\n\t\tlisten " + listen + "\n\t\tkey_file " + key + "\n\t}\n\tready 127.0.140.50:8181\n}\n"
	if n, err := CheckCorefile("Corefile", strings.NewReader(good)); err != nil || n != 1 {
		t.Errorf("a good Corefile: %d blocks, %v", n, err)
	}
	for name, bad := range map[string]string{
		"missing key":       strings.Replace(good, key, "/nonexistent/network.key", 1),
		"unknown property":  strings.Replace(good, "key_file", "keyfile", 1),
		"unknown directive": strings.Replace(good, "ready", "redy", 1),
		"zone not routed":   strings.Replace(good, "nyucd.test:53", "example.test:53", 1),
	} {
		if _, err := CheckCorefile("Corefile", strings.NewReader(bad)); err == nil {
			t.Errorf("%s: passed the check", name)
		}
	}
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckCorefile("Corefile", strings.NewReader(good)); err == nil {
		t.Error("a key file that holds no key passed the check")
	}
}

// FuzzCheckCorefile: any input gets an answer, never a panic or a hang.
// Inputs with import are skipped: they read other files.
func FuzzCheckCorefile(f *testing.F) {
	f.Add("nyucd.test:53 {\n\tcoral nyucd.test {\n\t\tlisten 127.0.140.51:4000\n\t}\n}\n")
	f.Add("nyucd.test {\n coral nyucd.test {\n listen 127.0.140.51:4000\n levels 50ms 10ms\n cluster 1 a\n drain 5s\n drain_file /x\n }\n}")
	f.Add("{\n")
	f.Add(". {\n coral\n}")
	f.Fuzz(func(t *testing.T, in string) {
		if strings.Contains(in, "import") {
			t.Skip()
		}
		_, _ = CheckCorefile("Corefile", strings.NewReader(in))
	})
}
