package coralcaddy

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/host"
	"github.com/coralcdn/coral/module/caddy/purge"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the Caddy app "coral": it holds this server's Coral DSHT node,
// which must outlive configuration reloads (its UDP socket, routing tables,
// clusters and the references it stores for others). The node lives in
// coraldht/host, one per listen address.
//
// Provision only checks the node settings (and reads the key file); the
// node is taken in Start, once every app of the configuration has been
// provisioned. A reload that fails to provision (a missing blacklist file,
// a bad origin rule) therefore never touches the running node, and
// `caddy validate` binds nothing. A reload that changes the node settings
// restarts the node in place on the same socket when it starts. Handlers
// and the admin API reach the node through the newest started app
// (runningNode), never a node saved at provisioning, so they follow
// restarts and drains.
type App struct {
	// Listen is the UDP address of the DSHT node, for example
	// "192.0.2.10:4000". Required.
	Listen string `json:"listen,omitempty"`

	// Advertise is the address other nodes use to reach this one; its IP
	// is also what DNS hands out for this proxy. Default: Listen.
	Advertise string `json:"advertise,omitempty"`

	// Bootstrap lists DSHT nodes (IP:port) to join through. The node
	// retries until one answers. Default: none (the first node of a
	// network).
	Bootstrap []string `json:"bootstrap,omitempty"`

	// KeyFile is the network key shared by every node of the Coral
	// network (the Caddyfile's `key`, its first file). Required unless
	// Listen is a loopback address; there the default is a fixed, public
	// development key.
	KeyFile string `json:"key_file,omitempty"`

	// AcceptedKeyFiles are further network keys the node accepts but does
	// not send with, during a key rotation (the Caddyfile's `key` option:
	// the files after the first). A reload that changes only the key
	// files or their contents updates the running node's keys in place.
	// Default: none.
	AcceptedKeyFiles []string `json:"accepted_key_files,omitempty"`

	// KeyFileSHA256 is the SHA-256 of the key files when the Caddyfile was
	// adapted. Only its change matters: it makes `caddy reload` see a new
	// key in the same file, which the Caddyfile's text alone would not
	// show ("config is unchanged"). The key files themselves are what
	// count.
	KeyFileSHA256 string `json:"key_file_sha256,omitempty"`

	// Levels are the RTT thresholds of cluster levels 1..n, decreasing.
	// Default 60ms and 20ms.
	Levels []caddy.Duration `json:"levels,omitempty"`

	// Clusters pins this node's cluster at some levels (level number →
	// cluster name), for policy or tests. Default: none (clusters are
	// found by RTT).
	Clusters map[string]string `json:"clusters,omitempty"`

	// Identity turns on node identity mode (coraldht's README, "Node
	// identities"): this node's certificate and key files, the fleet's
	// public keys and its revocation list (the Caddyfile's identity,
	// fleet, revocations and identity_optional options).
	Identity *host.IdentityFiles `json:"identity,omitempty"`

	// LegacyPeers answers in full the nodes of releases before address
	// cookies: only during a rolling upgrade from one (the Caddyfile's
	// legacy_peers).
	LegacyPeers bool `json:"legacy_peers,omitempty"`

	opts   host.Options
	ctx    caddy.Context
	logger *zap.Logger
	config *configDigest // this configuration's hash, for the reload metrics
	run    *appRun       // from Provision
}

// appRun is the app's hold on the node, from Start.
type appRun struct {
	mu      sync.Mutex
	handle  *host.Handle
	inst    *host.Instance // the node as it runs now, as current last saw it
	started atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "coral", New: func() caddy.Module { return new(App) }}
}

// current is the node as it runs now: after a restart (a newer
// configuration's, a failed one's rollback or a drain), the new one; nil
// before Start. Every way the adapter reaches the node goes through it, so
// it also makes each new node serve purges.
func (a *App) current() *host.Instance {
	if a == nil || a.run == nil {
		return nil
	}
	r := a.run
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handle == nil {
		return nil
	}
	if inst := r.handle.Instance(); r.inst != inst {
		r.inst = inst
		// Other proxies' purges arrive as app messages to the node; the
		// handler finds the caches through the admin registry.
		inst.Node().HandleApp(purge.Kind, peerPurgeHandler())
	}
	return r.inst
}

// handle is the app's hold on the node; nil before Start.
func (a *App) handle() *host.Handle {
	if a == nil || a.run == nil {
		return nil
	}
	a.run.mu.Lock()
	defer a.run.mu.Unlock()
	return a.run.handle
}

// Provision checks the node settings and reads the key file; the node is
// taken in Start.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.ctx = ctx
	a.run = &appRun{}
	a.config = &configDigest{}
	opts, err := a.nodeOptions()
	if err == nil {
		// Caddy's slog logger carries the module ID ("coral") as the
		// logger name, so per-logger log filters select these lines.
		opts.Logger = ctx.Slogger()
		if err = host.Check(opts); err != nil {
			err = fmt.Errorf("coral: %w", err)
		}
	}
	if err != nil {
		// Caddy cleans up an app that failed to provision before it
		// cancels the configuration: count the failure here.
		reloads.failed("", err)
		return err
	}
	a.opts = opts
	a.config.add("app", a)
	if a.KeyFile != "" {
		a.config.addFile(a.KeyFile)
	}
	for _, f := range a.AcceptedKeyFiles {
		a.config.addFile(f)
	}
	return nil
}

// nodeOptions reads the node settings; host checks them.
func (a *App) nodeOptions() (host.Options, error) {
	o := host.Options{Services: coraldht.ServiceHTTP}
	var err error
	if o.Listen, err = netip.ParseAddrPort(a.Listen); err != nil {
		return o, fmt.Errorf("coral: listen %q: want IP:PORT", a.Listen)
	}
	if a.Advertise != "" {
		if o.Advertise, err = netip.ParseAddrPort(a.Advertise); err != nil {
			return o, fmt.Errorf("coral: advertise %q: want IP:PORT", a.Advertise)
		}
	}
	for _, b := range a.Bootstrap {
		ap, err := netip.ParseAddrPort(b)
		if err != nil {
			return o, fmt.Errorf("coral: bootstrap %q: want IP:PORT", b)
		}
		o.Bootstrap = append(o.Bootstrap, ap)
	}
	for _, l := range a.Levels {
		o.Levels = append(o.Levels, time.Duration(l))
	}
	if len(a.Clusters) > 0 {
		o.Pins = map[int]string{}
		for _, k := range slices.Sorted(maps.Keys(a.Clusters)) {
			lvl, err := strconv.Atoi(k)
			if err != nil {
				return o, fmt.Errorf("coral: clusters: level %q is not a number", k)
			}
			o.Pins[lvl] = a.Clusters[k]
		}
	}
	o.KeyFile, o.AcceptedKeyFiles, o.Identity, o.LegacyPeers = a.KeyFile, a.AcceptedKeyFiles, a.Identity, a.LegacyPeers
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("coral: %w", err)
	}
	return o, nil
}

// Node is the app's DSHT node as it runs now; before Start, the node
// running on its listen address (the previous configuration's), if any.
func (a *App) Node() *coraldht.Node {
	if e := a.current(); e != nil {
		return e.Node()
	}
	for _, inst := range host.Running() {
		if inst.Listen() == a.opts.Listen {
			return inst.Node()
		}
	}
	return nil
}

// Joined reports whether the node has joined the network.
func (a *App) Joined() bool {
	e := a.current()
	return e != nil && e.Joined()
}

// Start takes the node: it starts it, shares the running one, or restarts
// it in place when the settings changed. Everything else in the
// configuration has been provisioned by now.
func (a *App) Start() error {
	err := a.checkOneProcess() // one process per address: oneprocess.go
	var h *host.Handle
	if err == nil {
		h, err = host.Acquire(a.opts)
	}
	if err != nil {
		reloads.failed(a.config.sum(), fmt.Errorf("coral: %w", err))
		return fmt.Errorf("coral: %w", err)
	}
	a.run.mu.Lock()
	a.run.handle = h
	a.run.mu.Unlock()
	a.run.started.Store(true)
	a.current()
	addRunningApp(a)
	startLoadPublisher()
	reloads.succeeded(a.config.sum())
	return nil
}

// Stop implements caddy.App; Cleanup releases the node.
func (a *App) Stop() error { return nil }

// Cleanup releases this configuration's hold on the node, and counts the
// configuration as failed if it never started (or was stopped because
// another app failed to start).
func (a *App) Cleanup() error {
	removeRunningApp(a)
	stopLoadPublisher()
	if a.ctx.Context != nil {
		if cause := context.Cause(a.ctx); a.run != nil && configFailed(cause, a.run.started.Load()) {
			reloads.failed(a.config.sum(), cause)
		}
	}
	if h := a.handle(); h != nil {
		h.Release()
	}
	return nil
}

// configFailed tells a configuration that failed from one that stopped
// normally (replaced, or the end of `caddy validate`), by the cause Caddy
// cancels its context with.
func configFailed(cause error, started bool) bool {
	if cause == nil {
		return false
	}
	msg := cause.Error()
	switch {
	case strings.HasPrefix(msg, "configuration start error"):
		return true
	case msg == "validation complete" || msg == "stopping apps":
		return false
	}
	return !started
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
