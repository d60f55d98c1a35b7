package coralcaddy

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/host"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the Caddy app "coral": it holds this server's Coral DSHT node,
// which must outlive configuration reloads (its UDP socket, routing tables,
// clusters and the references it stores for others). coral_proxy handlers
// find it through the context. The node lives in coraldht/host, one per
// listen address: a reload provisions the new app (taking a second hold on
// the same node) before the old one is cleaned up, and a reload that
// changes the node settings restarts the node in place on the same socket.
type App struct {
	// Listen is the UDP address of the DSHT node, for example
	// "192.0.2.10:4000". Required.
	Listen string `json:"listen,omitempty"`

	// Advertise is the address other nodes use to reach this one; its IP
	// is also what DNS hands out for this proxy. Default: Listen.
	Advertise string `json:"advertise,omitempty"`

	// Bootstrap lists DSHT nodes (IP:port) to join through. The node
	// retries until one answers.
	Bootstrap []string `json:"bootstrap,omitempty"`

	// KeyFile is the network key shared by every node of the Coral
	// network. Required unless Listen is a loopback address.
	KeyFile string `json:"key_file,omitempty"`

	// Levels are the RTT thresholds of cluster levels 1..n, decreasing.
	// Default 60ms and 20ms.
	Levels []caddy.Duration `json:"levels,omitempty"`

	// Clusters pins this node's cluster at some levels (level number →
	// cluster name), for policy or tests.
	Clusters map[string]string `json:"clusters,omitempty"`

	handle *host.Handle
	entry  *nodeEntry // the node as this configuration provisioned it
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "coral", New: func() caddy.Module { return new(App) }}
}

// nodeEntry is the node as a configuration provisioned it, for the admin
// API, the metrics and the status page.
type nodeEntry struct {
	node   *coraldht.Node
	joined atomic.Bool
	start  time.Time     // when the node started (its uptime, for coral_status)
	done   chan struct{} // closed once joined is final: joined, or the node stopped
}

func newNodeEntry(inst *host.Instance) *nodeEntry {
	e := &nodeEntry{node: inst.Node(), start: inst.Started(), done: make(chan struct{})}
	e.joined.Store(inst.Joined())
	go func() {
		defer close(e.done)
		select {
		case <-inst.WhenJoined():
			e.joined.Store(true)
		case <-inst.Stopped():
		}
	}()
	return e
}

// nodes lists the DSHT nodes running in this process by listen address.
var nodes runningNodes

type runningNodes struct{}

// Range calls f with each node's listen address and its *host.Instance,
// until f returns false.
func (runningNodes) Range(f func(listen, inst any) bool) {
	for _, inst := range host.Running() {
		if !f(inst.Listen().String(), inst) {
			return
		}
	}
}

// Provision takes the node, starting or restarting it as its settings
// require.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	opts, err := a.nodeOptions()
	if err != nil {
		return err
	}
	opts.Logger = slog.New(zapslog.NewHandler(a.logger.Core()))
	h, err := host.Acquire(opts)
	if err != nil {
		return fmt.Errorf("coral: %w", err)
	}
	a.handle = h
	a.entry = newNodeEntry(h.Instance())
	registerApp(a)
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
	o.KeyFile = a.KeyFile
	if err := o.Validate(); err != nil {
		return o, fmt.Errorf("coral: %w", err)
	}
	return o, nil
}

// Node is the app's DSHT node.
func (a *App) Node() *coraldht.Node { return a.entry.node }

// Joined reports whether the node has joined the network.
func (a *App) Joined() bool { return a.entry.joined.Load() }

// Start implements caddy.App; the node is already running.
func (a *App) Start() error { return nil }

// Stop implements caddy.App.
func (a *App) Stop() error { return nil }

// Cleanup releases this configuration's hold on the node.
func (a *App) Cleanup() error {
	unregisterApp(a)
	if a.handle != nil {
		a.handle.Release()
	}
	return nil
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
