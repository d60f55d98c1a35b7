package coralcaddy

import (
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// TestValidateBindsNothing (issue 22, defect 7): `caddy validate` (caddy.Validate)
// checks the coral app without binding its DSHT port: it succeeds while a
// running node holds the address, and starts no node.
func TestValidateBindsNothing(t *testing.T) {
	const listen = "127.0.140.40:4000"
	busy, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(listen)))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	raw, err := json.Marshal(map[string]any{"listen": listen})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}, AppsRaw: caddy.ModuleMap{"coral": raw}}
	if err := caddy.Validate(cfg); err != nil {
		t.Errorf("validate with the DSHT port in use: %v", err)
	}
	if n := nodeAt(listen); n != nil {
		t.Error("validate started a node")
	}

	bad, _ := json.Marshal(map[string]any{"listen": "127.0.140.41:4000", "key_file": "/nonexistent/network.key"})
	if err := caddy.Validate(&caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}, AppsRaw: caddy.ModuleMap{"coral": bad}}); err == nil {
		t.Error("validate accepted a key file that does not exist")
	}
}

// TestValidateLeavesCacheAlone: `caddy validate` on a live node passes
// although the running Caddy holds the cache's lock, and still checks the
// blacklist.
func TestValidateLeavesCacheAlone(t *testing.T) {
	dir := t.TempDir()
	store, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	saved := validating
	validating = true
	defer func() { validating = saved }()
	cfg := func(handler map[string]any) *caddy.Config {
		app, _ := json.Marshal(map[string]any{"listen": "127.0.140.42:4000"})
		httpApp, _ := json.Marshal(map[string]any{"servers": map[string]any{"s": map[string]any{
			"listen": []string{"127.0.140.42:9375"}, "routes": []any{map[string]any{"handle": []any{handler}}}}}})
		return &caddy.Config{Admin: &caddy.AdminConfig{Disabled: true}, AppsRaw: caddy.ModuleMap{"coral": app, "http": httpApp}}
	}
	if err := caddy.Validate(cfg(map[string]any{"handler": "coral_proxy", "zone": "nyud.test", "cache_dir": dir})); err != nil {
		t.Errorf("validate with the cache in use: %v", err)
	}
	if err := caddy.Validate(cfg(map[string]any{"handler": "coral_proxy", "zone": "nyud.test", "cache_dir": dir,
		"blacklist": filepath.Join(dir, "missing")})); err == nil {
		t.Error("validate accepted a missing blacklist")
	}
	// The fleet blacklist: its key is read and its sources checked, and
	// nothing is fetched.
	pub := filepath.Join(dir, "blacklist.pub")
	if _, err := abuse.GeneratePublisherKey(filepath.Join(dir, "blacklist.key"), pub, "test"); err != nil {
		t.Fatal(err)
	}
	fleet := func(key string, sources ...string) map[string]any {
		return map[string]any{"handler": "coral_proxy", "zone": "nyud.test", "cache_dir": dir,
			"fleet_blacklist": map[string]any{"key_file": key, "sources": sources}}
	}
	if err := caddy.Validate(cfg(fleet(pub, "http://127.0.140.42:1/never-fetched"))); err != nil {
		t.Errorf("validate with a fleet blacklist: %v", err)
	}
	for name, h := range map[string]map[string]any{
		"a missing key":   fleet(filepath.Join(dir, "missing.pub")),
		"no key":          fleet(""),
		"a private key":   fleet(filepath.Join(dir, "blacklist.key")),
		"an ftp source":   fleet(pub, "ftp://lists.example/list"),
		"a relative path": fleet(pub, "lists/blacklist.signed"),
	} {
		if err := caddy.Validate(cfg(h)); err == nil {
			t.Errorf("validate accepted %s", name)
		}
	}
}

// TestValidateZone (issue 37): the zone is a domain name, checked when
// the configuration is validated, so `caddy validate` refuses
// `coral_proxy not_a..zone`.
func TestValidateZone(t *testing.T) {
	for zone, ok := range map[string]bool{"nyud.net": true, "NYUD.net.": true, "not_a..zone": false, "a b": false, "nyud.123": false, "": false} {
		err := (&Handler{Zone: zone}).Validate()
		if (err == nil) != ok {
			t.Errorf("zone %q: Validate() = %v", zone, err)
		}
	}
}
