package coralcaddy

import (
	"encoding/json"
	"net"
	"net/netip"
	"testing"

	"github.com/caddyserver/caddy/v2"
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
