//go:build linux

// Package hostilelab attacks real bin/caddy processes and watches them
// while it does: a proxy and its peer (two Coral nodes in one DSHT), the
// evil origin of internal/lab/evilorigin, an honest origin, hostile clients
// (stalled readers, abandoned downloads, slowloris), and a canary client
// that keeps fetching honest objects — and a few "victim" objects on the
// evil origin itself — through both proxies and checks every byte.
//
// Attacks come in classes (see [Classes]); [Lab.Run] runs one class for a
// while, sampling the attacked proxy's resident memory, open files,
// goroutines and disk use every [SampleEvery], and returns a [Result]:
// the peaks, what the canary saw, and which invariants ([Bounds]) broke.
// test/hostilelab runs every class briefly under `make test`;
// `go run ./eval/hostile` runs them longer, with randomized combinations,
// and prints a table. README.md documents the invariants and their bounds.
package hostilelab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/evilorigin"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// Ports every process of the lab uses, each on its own loopback address.
const (
	Zone       = "nyud.test"
	AdminPort  = 2019
	DHTPort    = 4000
	ProxyPort  = 8090
	OriginPort = 8080
)

// Config describes a lab.
type Config struct {
	// Caddy is the bin/caddy to run.
	Caddy string
	// Dir holds the configurations, caches and logs (it must exist).
	Dir string
	// Net is the loopback /24 the lab uses, as "127.0.90": the honest
	// origin on .2, the evil origin on .3, the attacked proxy on .10 and
	// its peer on .11.
	Net string
	// CacheSize is each proxy's cache_size in bytes (default 64 MiB).
	CacheSize int64
	// Extra are more coral_proxy lines for both proxies ("min_ttl 0").
	Extra []string
	// Logf, if set, gets progress messages.
	Logf func(format string, args ...any)
}

// DefaultCacheSize is the cache_size of a lab that sets none.
const DefaultCacheSize = 64 << 20

// Lab is a running lab.
type Lab struct {
	cfg    Config
	Evil   *evilorigin.Server
	Honest *HonestOrigin
	// Proxy is the attacked proxy; Peer is its peer, which the canary
	// also uses (it fetches from Proxy as a peer).
	Proxy, Peer *Proxy
}

func (l *Lab) logf(format string, args ...any) {
	if l.cfg.Logf != nil {
		l.cfg.Logf(format, args...)
	}
}

// Start starts the origins and both proxies and waits until the proxies
// have joined one DSHT and answer.
func Start(ctx context.Context, cfg Config) (_ *Lab, err error) {
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Net == "" {
		cfg.Net = "127.0.90"
	}
	ip := func(last int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("%s.%d", cfg.Net, last)) }
	l := &Lab{cfg: cfg}
	defer func() {
		if err != nil {
			l.Stop()
		}
	}()
	if l.Evil, err = evilorigin.Listen(ip(3), OriginPort); err != nil {
		return nil, err
	}
	if l.Honest, err = StartHonest(ip(2), OriginPort); err != nil {
		return nil, err
	}
	if l.Proxy, err = l.startProxy("proxy", ip(10), netip.Addr{}); err != nil {
		return nil, err
	}
	if err = l.Proxy.waitReady(ctx, 0); err != nil {
		return nil, err
	}
	if l.Peer, err = l.startProxy("peer", ip(11), ip(10)); err != nil {
		return nil, err
	}
	for _, p := range []*Proxy{l.Proxy, l.Peer} {
		if err = p.waitReady(ctx, 1); err != nil {
			return nil, err
		}
	}
	l.logf("lab up: proxy %s (pid %d), peer %s (pid %d), honest origin %s, evil origin %s",
		l.Proxy.IP, l.Proxy.Pid(), l.Peer.IP, l.Peer.Pid(), l.Honest.Addr(), l.Evil.Addr())
	return l, nil
}

// Stop stops everything the lab started.
func (l *Lab) Stop() {
	for _, p := range []*Proxy{l.Peer, l.Proxy} {
		if p != nil {
			_ = p.proc.Stop(10 * time.Second)
		}
	}
	if l.Evil != nil {
		_ = l.Evil.Close()
	}
	if l.Honest != nil {
		l.Honest.Close()
	}
}

// CacheSize is the proxies' cache_size.
func (l *Lab) CacheSize() int64 { return l.cfg.CacheSize }

// EvilHost is the Coralized name of the evil origin.
func (l *Lab) EvilHost() string { return coralHost(l.Evil.Addr()) }

// HonestHost is the Coralized name of the honest origin.
func (l *Lab) HonestHost() string { return coralHost(l.Honest.Addr()) }

func coralHost(a netip.AddrPort) string { return fmt.Sprintf("%s.%d.%s", a.Addr(), a.Port(), Zone) }

// Proxy is one bin/caddy process of the lab.
type Proxy struct {
	Name     string
	IP       netip.Addr
	CacheDir string
	proc     *proc.Process
}

// Pid is the process's ID.
func (p *Proxy) Pid() int { return p.proc.Pid() }

// Addr is the proxy's HTTP address.
func (p *Proxy) Addr() string { return netip.AddrPortFrom(p.IP, ProxyPort).String() }

// Exited is an error with the log's tail if the process died.
func (p *Proxy) Exited() error { return p.proc.Exited() }

// LogTail is the last n lines of the process's log.
func (p *Proxy) LogTail(n int) string { return p.proc.LogTail(n) }

func (l *Lab) startProxy(name string, ip, boot netip.Addr) (*Proxy, error) {
	dir := filepath.Join(l.cfg.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	node := labconf.Node{Listen: netip.AddrPortFrom(ip, DHTPort)}
	if boot.IsValid() {
		node.Bootstrap = []netip.AddrPort{netip.AddrPortFrom(boot, DHTPort)}
	}
	px := labconf.Proxy{Zone: Zone, CacheDir: filepath.Join(dir, "cache"), CacheSize: fmt.Sprint(l.cfg.CacheSize),
		AllowOrigins: []string{"127.0.0.0/8"}, AllowPeers: []string{"127.0.0.0/8"}, RateLimit: "off"}
	for _, line := range l.cfg.Extra {
		f := strings.Fields(line)
		px.Extra = append(px.Extra, labconf.D(f[0], f[1:]))
	}
	admin := netip.AddrPortFrom(ip, AdminPort)
	text := labconf.Caddy{
		Comment:      "hostilelab " + name,
		Admin:        admin,
		AdminOrigins: []string{fmt.Sprintf("localhost:%d", AdminPort), admin.String()},
		HTTPSOff:     true,
		SkipTrust:    true,
		Grace:        "1s",
		Options:      []labconf.Directive{labconf.D("log").With(labconf.D("level", "WARN"))},
		Coral:        node,
		Sites:        []labconf.Directive{labconf.D(fmt.Sprintf(":%d", ProxyPort)).With(labconf.D("bind", ip), px.Directive())},
	}.String()
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(cfgPath, text); err != nil {
		return nil, err
	}
	pr, err := proc.Start(labconf.CaddyArgv(l.cfg.Caddy, cfgPath),
		proc.Options{Name: name, Dir: dir, Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, "caddy.log")})
	if err != nil {
		return nil, err
	}
	return &Proxy{Name: name, IP: ip, CacheDir: px.CacheDir, proc: pr}, nil
}

var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// adminGet GETs a path of the proxy's admin API (which accepts only its
// own names in Host).
func (p *Proxy) adminGet(path string) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+netip.AddrPortFrom(p.IP, AdminPort).String()+path, nil)
	if err != nil {
		return nil, err
	}
	req.Host = fmt.Sprintf("localhost:%d", AdminPort)
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("admin %s: %s: %.200s", path, resp.Status, b)
	}
	return b, err
}

// waitReady waits until the node has joined with at least contacts
// contacts and the site answers 421 for a name outside the zone.
func (p *Proxy) waitReady(ctx context.Context, contacts int) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if err := p.Exited(); err != nil {
			return err
		}
		if last = p.ready(contacts); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within 60 s: %v", p.Name, last)
}

func (p *Proxy) ready(contacts int) error {
	b, err := p.adminGet("/coral/status")
	if err != nil {
		return err
	}
	var st struct {
		Node *struct {
			Joined bool `json:"joined"`
		} `json:"node"`
		Levels []struct {
			Contacts int `json:"contacts"`
		} `json:"levels"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	if st.Node == nil || !st.Node.Joined {
		return errors.New("DSHT node not joined")
	}
	if len(st.Levels) == 0 || st.Levels[0].Contacts < contacts {
		return fmt.Errorf("%d level-0 contacts, want %d", len(st.Levels), contacts)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.Addr()+"/", nil)
	req.Host = "ready.example"
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		return fmt.Errorf("a name outside the zone got %s, want 421", resp.Status)
	}
	return nil
}

// dialer is how every client of the lab connects: loopback, a bounded
// connect time.
var dialer = &net.Dialer{Timeout: 5 * time.Second}
