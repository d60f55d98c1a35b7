package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"
	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/libdns/libdns"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(DNSProvider{})
}

// DNSProvider is the libdns provider "coral" (Caddy module
// dns.providers.coral): it publishes ACME DNS-01 challenge values through
// this server's Coral DSHT node, where every Coral name server finds them
// and answers the "_acme-challenge" TXT query of its alias zone (package
// coraldht/acmetxt). With it a Coral network gets certificates for its
// own zone from any ACME CA, with no DNS service outside the network:
//
//	*.nyud.net, nyud.net {
//	    tls {
//	        dns coral
//	    }
//	    coral_proxy { zone nyud.net }
//	}
//
// It needs the coral app (the global option coral) in the same
// configuration. It only publishes TXT records named "_acme-challenge.…";
// anything else is refused. A record cannot be deleted before its TTL
// (the record's, else 10 minutes; 1 minute to 1 hour), so DeleteRecords
// does nothing: ACME servers accept a TXT set that holds older values
// beside the expected one.
type DNSProvider struct {
	app    *App
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (DNSProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "dns.providers.coral", New: func() caddy.Module { return new(DNSProvider) }}
}

// Provision finds the coral app, whose node publishes.
func (p *DNSProvider) Provision(ctx caddy.Context) error {
	p.logger = ctx.Logger()
	app, err := ctx.AppIfConfigured("coral")
	if err != nil {
		return fmt.Errorf("dns coral: publishing ACME challenges needs the coral app (global option coral { listen … }): %w", err)
	}
	p.app = app.(*App)
	return nil
}

// UnmarshalCaddyfile reads "dns coral", which takes no arguments.
func (p *DNSProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the provider name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("dns coral takes no options, got %q", d.Val())
	}
	return nil
}

// joinWait bounds how long a publication waits for a node that is still
// joining (a server that has just started asks for its certificate at
// once); certmagic retries a failed attempt later.
const joinWait = 30 * time.Second

// AppendRecords publishes the challenge values among recs (TXT records
// named "_acme-challenge.<domain>" relative to zone).
func (p *DNSProvider) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	if err := p.app.waitJoined(ctx, joinWait); err != nil {
		return nil, fmt.Errorf("dns coral: %w", err)
	}
	var done []libdns.Record
	for _, rec := range recs {
		rr := rec.RR()
		name := libdns.AbsoluteName(rr.Name, zone)
		domain, ok := acmetxt.Domain(name)
		if rr.Type != "TXT" || !ok {
			return done, fmt.Errorf("dns coral: %s record %q: only ACME challenge TXT records (%s.<domain>) are published", rr.Type, name, acmetxt.Label)
		}
		if err := acmetxt.Publish(ctx, p.app.Node(), domain, rr.Data, rr.TTL); err != nil {
			return done, fmt.Errorf("dns coral: %w", err)
		}
		p.logger.Info("published ACME challenge in the DSHT", zap.String("name", name), zap.Duration("ttl", rr.TTL))
		done = append(done, rec)
	}
	return done, nil
}

// DeleteRecords does nothing: DSHT values live until their TTL ends.
func (p *DNSProvider) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return nil, nil
}

// waitJoined waits at most d for the app's node to join the network.
func (a *App) waitJoined(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	e := a.current()
	if e == nil {
		return errNodeStopped
	}
	select {
	case <-e.WhenJoined():
	case <-e.Stopped():
	case <-t.C:
		return fmt.Errorf("the DSHT node has not joined the network after %v", d)
	case <-ctx.Done():
		return ctx.Err()
	}
	if !e.Joined() {
		return errNodeStopped
	}
	return nil
}

var errNodeStopped = errors.New("the DSHT node stopped before joining the network")

// Interface guards.
var (
	_ caddy.Provisioner     = (*DNSProvider)(nil)
	_ caddyfile.Unmarshaler = (*DNSProvider)(nil)
	_ certmagic.DNSProvider = (*DNSProvider)(nil)
)
