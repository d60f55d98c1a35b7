package coralcaddy

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/internal/portguard"
	"go.uber.org/zap"
)

// One process per address: a second coral-caddy started on a node's HTTP
// or admin address would bind beside the first (Caddy's listeners use
// SO_REUSEPORT, for reloads) and take a share of its clients and of its
// admin API's requests. The coral app refuses to start when another
// process serves any address of the configuration (internal/portguard).

// checkOneProcess is the app's Start hook: it checks the HTTP app's
// listen addresses (which may not be bound yet: the apps start in no
// fixed order), every socket this process already serves (the admin API,
// bound before any app, and listeners of the configuration now running),
// and the DSHT node's address. `caddy validate` never starts the app, so
// it checks a configuration on a live node without tripping over it.
func (a *App) checkOneProcess() error {
	socks := []portguard.Socket{portguard.UDP(a.opts.Listen)}
	own, err := portguard.Own()
	if err != nil {
		a.logger.Warn("cannot check that no other process serves this configuration's addresses", zap.Error(err))
		return nil
	}
	socks = append(socks, own...)
	if a.ctx.Context != nil {
		if app, err := a.ctx.AppIfConfigured("http"); err == nil {
			socks = append(socks, httpSockets(app.(*caddyhttp.App))...)
		}
	}
	return portguard.Check(socks...)
}

// httpSockets are the TCP sockets of the HTTP app's servers. Addresses
// that name a host rather than an IP are left out (once bound, Own lists
// them), and so are unix sockets (see package portguard).
func httpSockets(app *caddyhttp.App) []portguard.Socket {
	repl := caddy.NewReplacer()
	var out []portguard.Socket
	for _, srv := range app.Servers {
		for _, l := range srv.Listen {
			na, err := caddy.ParseNetworkAddress(repl.ReplaceKnown(l, ""))
			if err != nil {
				continue
			}
			if !strings.HasPrefix(na.Network, "tcp") {
				continue
			}
			for p := na.StartPort; p <= na.EndPort && p <= 65535; p++ {
				ss, err := portguard.HostPort(na.Host, strconv.Itoa(int(p)), "tcp")
				if err == nil {
					out = append(out, ss...)
				}
			}
		}
	}
	return out
}
