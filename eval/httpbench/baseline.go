package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// The A/B of two builds (-baseline): a second Caddy, another binary with
// the same configuration on its own address, whose coral_proxy is the
// target coral-old.

// setUpBaseline lays out the -baseline Caddy on addr: its directory (data,
// configuration, cache) and its Caddyfile, the HTTP sites of -caddy's on
// its own address, and the target coral-old, asked for with the same Host
// as coral.
func (b *bench) setUpBaseline(addr netip.Addr, origin coralname.Origin) error {
	dir := filepath.Join(b.dir, "baseline")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	var err error
	if b.baseCaddyfile, err = b.caddyfileText(addr, dir, false); err != nil {
		return err
	}
	if err := labconf.WriteFile(filepath.Join(dir, "Caddyfile"), b.baseCaddyfile); err != nil {
		return fmt.Errorf("writing the baseline's Caddyfile: %w", err)
	}
	b.targets = append(b.targets, &target{name: "coral-old", server: "coral",
		addr: netip.AddrPortFrom(addr, uint16(b.p.Port)), host: coralname.Coralize(origin, zone)})
	return nil
}

// startBaseline starts the -baseline Caddy, if there is one, and waits
// until its file_server answers.
func (b *bench) startBaseline(ctx context.Context) error {
	t := b.target("coral-old")
	if t == nil {
		return nil
	}
	dir := filepath.Join(b.dir, "baseline")
	var err error
	b.base, err = startServer("caddy", dir, labconf.CaddyArgv(b.p.Baseline, filepath.Join(dir, "Caddyfile")), labconf.CaddyEnv(dir))
	if err != nil {
		return err
	}
	b.commands = append(b.commands, shellJoin(b.base.Argv))
	t.srv = b.base
	file := &target{name: "file-old", server: "file", addr: netip.AddrPortFrom(t.addr.Addr(), uint16(b.p.Port+1))}
	return evalrun.WaitFor(ctx, "the baseline Caddy to answer", startWithin, b.base.Exited, func() error {
		_, err := get(file, "/"+sizeName(b.p.Sizes[0]))
		return err
	})
}
