package host

import (
	"crypto/ed25519"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
)

// identityFiles writes a fleet, and a certificate and key for one node
// under it, to dir: the files coral-fleet makes.
type identityFiles struct {
	dir      string
	priv     ed25519.PrivateKey
	files    IdentityFiles
	serial   uint64
	revision uint64
}

func newIdentityFiles(t *testing.T) *identityFiles {
	t.Helper()
	f := &identityFiles{dir: t.TempDir()}
	pub, priv := fleet.GenerateKey()
	f.priv = priv
	f.files.Fleet = f.write(t, "fleet.pub", 0o644, fleet.Marshal(fleet.LabelFleetPublicKey, nil, pub))
	nodePub, nodePriv := fleet.GenerateKey()
	f.serial = 7
	c, err := fleet.Issue(priv, nodePub, f.serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.files.Certificate = f.write(t, "node.cert", 0o644, fleet.Marshal(fleet.LabelCertificate, nil, c.Raw))
	f.files.Key = f.write(t, "node.key", 0o600, fleet.Marshal(fleet.LabelNodeKey, nil, nodePriv.Seed()))
	f.files.Revocations = f.revoke(t, 42)
	return f
}

func (f *identityFiles) write(t *testing.T, name string, mode os.FileMode, b []byte) string {
	t.Helper()
	p := filepath.Join(f.dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// revoke writes the next revocation list, naming serials.
func (f *identityFiles) revoke(t *testing.T, serials ...uint64) string {
	t.Helper()
	f.revision++
	l, err := fleet.NewRevocationList(f.priv, f.revision, time.Now(), serials)
	if err != nil {
		t.Fatal(err)
	}
	return f.write(t, "revoked.list", 0o644, fleet.Marshal(fleet.LabelRevocationList, nil, l.Raw))
}

func TestParseIdentityOptions(t *testing.T) {
	o, err := ParseOptions(newLines(`
		listen 127.0.41.1:4000
		identity /etc/coral/node.cert /etc/coral/node.key
		fleet /etc/coral/fleet.pub
		revocations /etc/coral/revoked.list 10s
		identity_optional
		legacy_peers`))
	if err != nil {
		t.Fatal(err)
	}
	if !o.LegacyPeers || !o.config().LegacyPeers {
		t.Fatal("legacy_peers not read")
	}
	want := &IdentityFiles{Certificate: "/etc/coral/node.cert", Key: "/etc/coral/node.key", Fleet: "/etc/coral/fleet.pub",
		Revocations: "/etc/coral/revoked.list", RevocationPoll: 10 * time.Second, Optional: true}
	if !reflect.DeepEqual(o.Identity, want) {
		t.Fatalf("identity %+v, want %+v", o.Identity, want)
	}
	for block, msg := range map[string]string{
		"identity /a":                           "identity takes the node's certificate file and its key file",
		"identity /a /b":                        "identity needs the fleet's public keys",
		"fleet /f":                              "identity takes the node's certificate file",
		"identity /a /b\nfleet /f\nrevocations": "revocations takes a file",
		"identity /a /b\nfleet /f\nrevocations /r 1ms": "want a duration of at least 1s",
		"identity_optional now":                        "identity_optional takes 0 argument(s)",
	} {
		if _, err := ParseOptions(newLines("listen 127.0.41.1:4000\n" + block)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v; want %q", block, err, msg)
		}
	}
}

// TestIdentityNode: a node acquired with identity files runs in identity
// mode with the revocation list of its file, and installs a newer list
// written to that file within one poll interval, without a reload.
// Files that do not verify are refused before any node starts.
func TestIdentityNode(t *testing.T) {
	f := newIdentityFiles(t)
	f.files.RevocationPoll = time.Second
	listen := netip.MustParseAddrPort("127.0.180.7:4000")
	files := f.files
	h := acquire(t, Options{Listen: listen, Identity: &files})
	defer h.Release()
	info, ok := h.Node().Identity()
	if !ok || info.Serial != f.serial || info.RevocationList != 1 || info.Revoked != 1 {
		t.Fatalf("identity %+v, %v", info, ok)
	}
	f.revoke(t, 42, 43)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info, _ := h.Node().Identity(); info.RevocationList == 2 {
			if info.Revoked != 2 {
				t.Fatalf("list 2 installed with %d serials", info.Revoked)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a newer revocation list was not installed within 10 poll intervals")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Files that do not verify.
	other := newIdentityFiles(t)
	for name, spoil := range map[string]func(x *IdentityFiles){
		"another fleet's certificate": func(x *IdentityFiles) { x.Fleet = other.files.Fleet },
		"another node's key":          func(x *IdentityFiles) { x.Key = other.files.Key },
		"own certificate revoked": func(x *IdentityFiles) {
			x.Revocations = filepath.Join(t.TempDir(), "own.list")
			l, _ := fleet.NewRevocationList(f.priv, 9, time.Now(), []uint64{f.serial})
			_ = os.WriteFile(x.Revocations, fleet.Marshal(fleet.LabelRevocationList, nil, l.Raw), 0o644)
		},
	} {
		bad := f.files
		spoil(&bad)
		if err := Check(Options{Listen: netip.MustParseAddrPort("127.0.180.8:4000"), Identity: &bad}); err == nil {
			t.Errorf("%s: Check accepted", name)
		}
	}
}

// TestRevocationListNotThereYet: a revocation list file that does not
// exist yet is no list; once written, the poller installs it.
func TestRevocationListNotThereYet(t *testing.T) {
	f := newIdentityFiles(t)
	if err := os.Remove(f.files.Revocations); err != nil {
		t.Fatal(err)
	}
	f.files.RevocationPoll = time.Second
	files := f.files
	h := acquire(t, Options{Listen: netip.MustParseAddrPort("127.0.180.9:4000"), Identity: &files})
	defer h.Release()
	if info, _ := h.Node().Identity(); info.RevocationList != 0 {
		t.Fatalf("a list in force without a file: %+v", info)
	}
	f.revoke(t, 99)
	deadline := time.Now().Add(10 * time.Second)
	for h.Node().Revocations() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the list written later was not installed within 10 poll intervals")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
