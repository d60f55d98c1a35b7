package coralcaddy

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/host"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/proxy"
)

// The running coral apps and coral_proxy handlers of this process: what
// the admin API, the status page, purges and the DNS provider find the
// node, the stores and the engines through.

// The running apps and handlers, in the order they were provisioned. A
// reload provisions the new configuration before cleaning up the old one,
// so for a moment both are here; the newest comes last.
var running struct {
	mu      sync.Mutex
	apps    []*App
	proxies []*Handler
}

// addRunningApp makes a started coral app visible to the rest of the
// process (admin API, status page, purges). Call it in App.Start, once the
// node is there.
func addRunningApp(a *App) {
	running.mu.Lock()
	defer running.mu.Unlock()
	if !slices.Contains(running.apps, a) {
		running.apps = append(running.apps, a)
	}
}

// runningNode is the DSHT node of the newest started coral app, as it runs
// now, or nil: the one way the adapter reaches the node (App.current keeps
// it serving purges).
func runningNode() *coraldht.Node {
	if e := runningInstance(); e != nil {
		return e.Node()
	}
	return nil
}

// runningDHT is runningNode as the proxies' Config.Node: nil (the
// interface) when no node runs.
func runningDHT() proxy.DHT {
	if n := runningNode(); n != nil {
		return n
	}
	return nil
}

// dhtAddrs are the listen and advertised addresses of the DSHT nodes
// running in this process: the proxies' Config.OwnAddrs.
func dhtAddrs() []netip.Addr {
	var out []netip.Addr
	for _, inst := range host.Running() {
		out = append(out, inst.Listen().Addr(), inst.Node().Addr().Addr())
	}
	return out
}

// runningApp is the newest started coral app with a node, or nil.
func runningApp() (*App, *host.Instance) {
	apps, _ := runningAll()
	for i := len(apps) - 1; i >= 0; i-- {
		if e := apps[i].current(); e != nil && e.Node() != nil {
			return apps[i], e
		}
	}
	return nil, nil
}

func runningInstance() *host.Instance {
	_, e := runningApp()
	return e
}

// removeRunningApp removes the app; call it first thing in App.Cleanup.
func removeRunningApp(a *App) {
	running.mu.Lock()
	defer running.mu.Unlock()
	running.apps = slices.DeleteFunc(running.apps, func(x *App) bool { return x == a })
}

// addRunningProxy makes a provisioned coral_proxy handler (its store and
// proxy) visible to the rest of the process. Call it at the end of
// Handler.Provision; the handler's fields must not change afterwards.
func addRunningProxy(h *Handler) {
	running.mu.Lock()
	defer running.mu.Unlock()
	if !slices.Contains(running.proxies, h) {
		running.proxies = append(running.proxies, h)
	}
}

// removeRunningProxy removes the handler; call it first thing in
// Handler.Cleanup, before the store is released.
func removeRunningProxy(h *Handler) {
	running.mu.Lock()
	defer running.mu.Unlock()
	running.proxies = slices.DeleteFunc(running.proxies, func(x *Handler) bool { return x == h })
}

func runningAll() (apps []*App, proxies []*Handler) {
	running.mu.Lock()
	defer running.mu.Unlock()
	return slices.Clone(running.apps), slices.Clone(running.proxies)
}

// cacheRef is one distinct store and the handlers using it: their
// zones, the store's reference table and their proxies.
type cacheRef struct {
	dir     string
	store   *diskcache.Store
	zones   []string
	refs    []*proxy.References
	proxies []*proxy.Proxy
}

// runningCaches lists the distinct stores of the registered handlers,
// newest first.
func runningCaches() []cacheRef {
	_, proxies := runningAll()
	var out []cacheRef
	for i := len(proxies) - 1; i >= 0; i-- {
		h := proxies[i]
		j := slices.IndexFunc(out, func(c cacheRef) bool { return c.store == h.store })
		if j < 0 {
			out = append(out, cacheRef{dir: h.storeKey, store: h.store})
			j = len(out) - 1
		}
		if !slices.Contains(out[j].zones, h.Zone) {
			out[j].zones = append(out[j].zones, h.Zone)
		}
		out[j].proxies = append(out[j].proxies, h.proxy)
		if !slices.Contains(out[j].refs, h.refs) {
			out[j].refs = append(out[j].refs, h.refs)
		}
	}
	return out
}
