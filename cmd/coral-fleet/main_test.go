package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/fleet"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func fleetCmd(t *testing.T, want int, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	if got := run(args, &out, &errs, now); got != want {
		t.Fatalf("coral-fleet %s: status %d, want %d\n%s%s", strings.Join(args, " "), got, want, out.String(), errs.String())
	}
	return out.String() + errs.String()
}

// TestFleetLifecycle: a fleet is created, nodes issued, one revoked and
// then another; every file loads as a node would load it, and a node
// started with what was issued runs in identity mode.
func TestFleetLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fleet")
	fleetCmd(t, 0, "init", dir)
	fleetCmd(t, 1, "init", dir) // never overwrites a fleet key
	if st, err := os.Stat(filepath.Join(dir, "fleet.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("fleet.key: %v %v", st, err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if out := fleetCmd(t, 0, "issue", "-days", "30", dir, n); !strings.Contains(out, "node "+n) {
			t.Fatalf("issue %s: %s", n, out)
		}
	}
	keys, err := fleet.LoadPublicKeys(filepath.Join(dir, "fleet.pub"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := fleet.LoadCertificate(filepath.Join(dir, "nodes", "n2.cert"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Serial != 2 || c.Check(keys, now.Add(29*24*time.Hour)) != nil || c.Check(keys, now.Add(31*24*time.Hour)) == nil {
		t.Fatalf("certificate %+v", c)
	}
	key, err := fleet.LoadPrivateKey(filepath.Join(dir, "nodes", "n2.key"), fleet.LabelNodeKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&coraldht.Identity{Certificate: c, Key: key, Fleet: keys}).Check(now); err != nil {
		t.Fatalf("the issued identity: %v", err)
	}

	fleetCmd(t, 0, "revoke", dir, "n3")
	fleetCmd(t, 0, "revoke", dir, "1")
	l, err := fleet.LoadRevocationList(filepath.Join(dir, "revoked.list"), keys)
	if err != nil {
		t.Fatal(err)
	}
	if l.Number != 2 || !l.Revoked(1) || !l.Revoked(3) || l.Revoked(2) {
		t.Fatalf("list %+v", l)
	}
	if out := fleetCmd(t, 1, "revoke", dir, "n9"); !strings.Contains(out, "no certificate issued") {
		t.Fatalf("revoking a name never issued: %s", out)
	}
	if out := fleetCmd(t, 0, "show", filepath.Join(dir, "revoked.list")); !strings.Contains(out, "revocation list 2") || !strings.Contains(out, "[1 3]") {
		t.Fatalf("show: %s", out)
	}
	if out := fleetCmd(t, 0, "show", filepath.Join(dir, "nodes", "n2.cert")); !strings.Contains(out, "serial 2") {
		t.Fatalf("show: %s", out)
	}
	fleetCmd(t, 2, "issue", dir)
	fleetCmd(t, 2, "frobnicate")
	fleetCmd(t, 1, "issue", dir, "no/slash")
}
