//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/coralcdn/coral/internal/lab/wan"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// labOptions are what a run builds.
type labOptions struct {
	Dir         string
	Silent      float64 // share of silent routers
	Loss        float64
	Seed        uint64
	PerSite     int // Coral nodes per node site
	Clients     int // clients per site, beside the proxies
	LANClients  int // clients per site on its client LAN
	OriginLine  string
	CoreDNS     string
	Caddy       string
	Logf        func(string, ...any)
	Files, Size int
	// silent, if set, picks the silent routers by name instead of Silent.
	silent func(router string) bool
	// config is what the fleet runs beyond the defaults.
	config fleet.Config
}

// buildLab builds the wide area of w.
func buildLab(ctx context.Context, w *world, o labOptions) (*wan.Lab, error) {
	var sites []wan.Site
	for s := range w.Sites {
		sites = append(sites, wan.Site{Name: w.name(s), Region: w.region(s)})
	}
	return wan.New(ctx, wan.Options{Sites: sites, RTT: w.RTT, SilentShare: o.Silent, Silent: o.silent, Loss: o.Loss, Seed: o.Seed,
		Dir: filepath.Join(o.Dir, "wan"), Logf: func(string, ...any) {}})
}

// startFleet deploys Coral on the lab.
func startFleet(ctx context.Context, l *wan.Lab, w *world, o labOptions, org *origin) (*fleet.Fleet, error) {
	return fleet.Start(ctx, fleet.Options{
		Lab: l, NodeSites: w.NodeSites, NodesPerSite: o.PerSite, ClientSites: w.ClientSites,
		Clients: o.Clients, LANClients: o.LANClients, OriginSite: w.OriginSite, OriginLine: o.OriginLine,
		Origin: org, DNSSite: w.DNSSite, CoreDNS: o.CoreDNS, Caddy: o.Caddy,
		Dir: filepath.Join(o.Dir, "fleet"), Logf: o.Logf, Config: o.config,
	})
}

// origin serves the paper's files: /f0 … /f(n-1), each size bytes of a
// fixed pattern, fresh for a day; it logs every request.
type origin struct {
	files, size int
	log         *originLog
}

func newOrigin(files, size int) *origin { return &origin{files: files, size: size, log: &originLog{}} }

// body is file i's content.
func body(i, size int) []byte {
	b := make([]byte, 0, size)
	seed := sha256.Sum256([]byte("coral wan file " + strconv.Itoa(i)))
	for len(b) < size {
		b = append(b, seed[:]...)
		seed = sha256.Sum256(seed[:])
	}
	return b[:size]
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/f"))
	if err != nil || i < 0 || i >= o.files {
		http.NotFound(w, r)
		return
	}
	o.log.add(r.URL.Path, r.RemoteAddr)
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(o.size))
	_, _ = w.Write(body(i, o.size))
}
