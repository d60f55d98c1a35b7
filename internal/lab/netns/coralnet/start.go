package coralnet

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// normalize fills in the defaults and checks what Start needs.
func (o *Options) normalize() error {
	if o.Nodes == 0 {
		o.Nodes = 6
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Nodes < 2 || o.Nodes > 80 || o.Clients > 100 {
		return fmt.Errorf("coralnet: %d nodes, %d clients: want 2–80 nodes, at most 100 clients", o.Nodes, o.Clients)
	}
	if o.Dir == "" || o.Origin == nil || o.CoreDNS == "" || o.Caddy == "" {
		return errors.New("coralnet: Dir, Origin, CoreDNS and Caddy are required")
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// addOrigin adds the origin host, serving Options.Origin, and the control
// host the lab's own admin requests come from.
func (n *Net) addOrigin() (err error) {
	if n.Origin, err = n.Lab.AddHost("origin", OriginAddr()); err != nil {
		return err
	}
	if n.Control, err = n.Lab.AddHost("control", host(5)); err != nil {
		return err
	}
	n.ctl = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.Control.DialContext, DisableKeepAlives: true}}
	ln, err := n.Origin.Listen("tcp", netip.AddrPortFrom(OriginAddr(), PortHTTP).String())
	if err != nil {
		return err
	}
	n.originSrv = &http.Server{Handler: n.opts.Origin, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = n.originSrv.Serve(ln) }()
	return nil
}

// addHosts adds the node hosts (half east, half west), one Unbound per
// region, and the client hosts, which alternate between the regions.
func (n *Net) addHosts() error {
	o := n.opts
	for i := range o.Nodes {
		region := RegionEast
		if i >= (o.Nodes+1)/2 {
			region = RegionWest
		}
		h, err := n.Lab.AddHost(fmt.Sprintf("node%d", i), host(10+i))
		if err != nil {
			return err
		}
		nd := &Node{Index: i, Host: h, Region: region, Dir: filepath.Join(o.Dir, h.Name),
			CoreDNSBin: o.CoreDNS, CaddyBin: o.Caddy, Keys: []string{n.KeyFile}}
		if o.NodeOptions != nil {
			nd.NodeOptions = o.NodeOptions(i, h.Name)
		}
		if err := os.MkdirAll(nd.Dir, 0o755); err != nil {
			return err
		}
		n.Nodes = append(n.Nodes, nd)
	}
	for i, region := range []string{RegionEast, RegionWest} {
		h, err := n.Lab.AddHost("unbound-"+region, host(3+i))
		if err != nil {
			return err
		}
		r := &Resolver{Host: h, Region: region}
		if err := n.startUnbound(r); err != nil {
			return err
		}
		n.Resolvers = append(n.Resolvers, r)
	}
	for i := range o.Clients {
		h, err := n.Lab.AddHost(fmt.Sprintf("client%d", i), host(100+i))
		if err != nil {
			return err
		}
		r := n.Resolvers[i%2]
		n.Clients = append(n.Clients, &Client{Host: h, Resolver: r.Host.Addr, Region: r.Region})
	}
	return nil
}
