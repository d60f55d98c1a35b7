package coralcaddy

import (
	"context"
	"errors"
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
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
)

func init() {
	caddy.RegisterModule(App{})
}

// App is the Caddy app "coral": it owns this server's Coral DSHT node,
// which must outlive configuration reloads (its UDP socket, routing tables,
// clusters and the references it stores for others). coral_proxy handlers
// find it through the context. The node itself lives in a usage pool keyed
// by the listen address: a reload provisions the new app (taking a second
// reference to the same node) before the old one is cleaned up.
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

	entry  *nodeEntry
	key    string
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "coral", New: func() caddy.Module { return new(App) }}
}

// nodes holds the DSHT nodes by listen address across reloads.
var nodes = caddy.NewUsagePool()

// nodeEntry is one pooled node.
type nodeEntry struct {
	ident  string
	node   *coraldht.Node
	joined atomic.Bool
	start  time.Time // when the node started (its uptime, for coral_status)
	cancel context.CancelFunc
	done   chan struct{}
}

// Destruct implements caddy.Destructor: the last configuration using the
// node is gone.
func (e *nodeEntry) Destruct() error {
	e.cancel()
	err := e.node.Close()
	<-e.done
	return err
}

// Provision takes (or creates) the node.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	cfg, boot, err := a.nodeConfig()
	if err != nil {
		return err
	}
	ident := fmt.Sprintf("%v|%v|%v|%s|%v", cfg.Advertise, cfg.Levels, boot, a.KeyFile, a.Clusters)
	cfg.Logger = slog.New(zapslog.NewHandler(a.logger.Core()))
	val, _, err := nodes.LoadOrNew(a.Listen, func() (caddy.Destructor, error) {
		return a.startNode(cfg, ident, boot)
	})
	if err != nil {
		return fmt.Errorf("coral: %w", err)
	}
	a.key = a.Listen
	a.entry = val.(*nodeEntry)
	registerApp(a)
	if a.entry.ident != ident {
		// The pool holds the node from the previous configuration, whose
		// socket this one would need: node settings change only on restart.
		a.logger.Warn("DSHT node settings changed; they take effect when Caddy restarts", zap.String("listen", a.Listen))
	}
	return nil
}

func (a *App) nodeConfig() (coraldht.Config, []netip.AddrPort, error) {
	cfg := coraldht.DefaultConfig()
	cfg.Services = coraldht.ServiceHTTP
	listen, err := netip.ParseAddrPort(a.Listen)
	if err != nil {
		return cfg, nil, fmt.Errorf("coral: listen %q: want IP:PORT", a.Listen)
	}
	if a.Advertise != "" {
		if cfg.Advertise, err = netip.ParseAddrPort(a.Advertise); err != nil {
			return cfg, nil, fmt.Errorf("coral: advertise %q: want IP:PORT", a.Advertise)
		}
	}
	var boot []netip.AddrPort
	for _, b := range a.Bootstrap {
		ap, err := netip.ParseAddrPort(b)
		if err != nil {
			return cfg, nil, fmt.Errorf("coral: bootstrap %q: want IP:PORT", b)
		}
		boot = append(boot, ap)
	}
	if len(a.Levels) > 0 {
		cfg.Levels = nil
		for _, l := range a.Levels {
			cfg.Levels = append(cfg.Levels, time.Duration(l))
		}
	}
	if len(a.Clusters) > 0 {
		cfg.Pins = map[int]string{}
		for _, k := range slices.Sorted(maps.Keys(a.Clusters)) {
			lvl, err := strconv.Atoi(k)
			if err != nil {
				return cfg, nil, fmt.Errorf("coral: clusters: level %q is not a number", k)
			}
			cfg.Pins[lvl] = a.Clusters[k]
		}
	}
	if a.KeyFile != "" {
		k, err := coraldht.LoadKeyFile(a.KeyFile)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Key = k
	} else if !listen.Addr().IsLoopback() {
		return cfg, nil, errors.New("coral: key_file is required unless the node listens on loopback (" + coraldht.KeyHelp + ")")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, err
	}
	return cfg, boot, nil
}

func (a *App) startNode(cfg coraldht.Config, ident string, boot []netip.AddrPort) (*nodeEntry, error) {
	tr, err := coraldht.ListenUDP(a.Listen)
	if err != nil {
		return nil, err
	}
	node, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		_ = tr.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &nodeEntry{ident: ident, node: node, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	logger := a.logger
	go e.join(ctx, boot, logger)
	logger.Info("DSHT node started", zap.Stringer("addr", node.Addr()), zap.String("id", node.ID().Short()))
	return e, nil
}

// join bootstraps until it succeeds (coraldht's JoinRetrying: 1 s to 30 s
// apart). Without bootstrap addresses the node is the first of its network
// and counts as joined at once.
func (e *nodeEntry) join(ctx context.Context, boot []netip.AddrPort, logger *zap.Logger) {
	defer close(e.done)
	if len(boot) == 0 {
		e.joined.Store(true)
	}
	err := e.node.JoinRetrying(ctx, boot, func(err error, in time.Duration) {
		if len(boot) > 0 {
			logger.Warn("bootstrap failed; retrying", zap.Error(err), zap.Duration("in", in))
		}
	})
	if err == nil {
		e.joined.Store(true)
	}
}

// Node is the app's DSHT node.
func (a *App) Node() *coraldht.Node { return a.entry.node }

// Joined reports whether the node has joined the network.
func (a *App) Joined() bool { return a.entry.joined.Load() }

// Start implements caddy.App; the node is already running.
func (a *App) Start() error { return nil }

// Stop implements caddy.App.
func (a *App) Stop() error { return nil }

// Cleanup releases this configuration's reference to the node.
func (a *App) Cleanup() error {
	unregisterApp(a)
	if a.key == "" {
		return nil
	}
	_, err := nodes.Delete(a.key)
	return err
}

// Interface guards.
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
