// Command dhtdemo starts a small Coral DSHT on real UDP sockets on loopback
// addresses (127.0.0.2, 127.0.0.3, …), joins the nodes, and shows put, get
// and put+get working between them, with the routing behind each answer.
// Everything it prints is measured from the running nodes.
//
//	go run ./cmd/dhtdemo [-nodes 8] [-port 4000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

func main() {
	nodes := flag.Int("nodes", 8, "number of nodes (2–200), on 127.0.0.2 upward")
	port := flag.Int("port", 4000, "UDP port every node listens on")
	flag.Parse()
	if err := run(*nodes, *port); err != nil {
		fmt.Fprintln(os.Stderr, "dhtdemo:", err)
		os.Exit(1)
	}
}

func run(count, port int) error {
	if count < 2 || count > 200 {
		return fmt.Errorf("-nodes %d: want 2 to 200", count)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A real network key, through the same file path operators use.
	dir, err := os.MkdirTemp("", "coral-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "network.key")
	if err := coraldht.WriteKeyFile(keyFile); err != nil {
		return err
	}
	key, err := coraldht.LoadKeyFile(keyFile)
	if err != nil {
		return err
	}

	fmt.Printf("Starting %d Coral nodes on UDP 127.0.0.2–127.0.0.%d port %d (network key %s)\n\n", count, count+1, port, keyFile)
	nodes, err := startNodes(ctx, key, count, port)
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, nodes: nodes, name: map[coraldht.ID]string{}}
	for i, n := range nodes {
		d.name[n.ID()] = fmt.Sprintf("N%d", i+1)
	}
	d.printTables()
	if err := d.putAndGet(); err != nil {
		return err
	}
	first := d.flashCrowd()
	d.printTraffic()
	if first != 1 {
		return fmt.Errorf("put+get race: %d nodes saw no values, want exactly 1", first)
	}
	return nil
}

// startNodes starts count nodes on 127.0.0.2 upward and joins them through
// the first. It returns the nodes started so far also with an error.
func startNodes(ctx context.Context, key *coraldht.Key, count, port int) ([]*coraldht.Node, error) {
	var nodes []*coraldht.Node
	for i := range count {
		addr := fmt.Sprintf("127.0.0.%d:%d", i+2, port)
		tr, err := coraldht.ListenUDP(addr)
		if err != nil {
			return nodes, fmt.Errorf("%v (is another demo running? try -port)", err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = key
		cfg.Services = coraldht.ServiceHTTP | coraldht.ServiceDNS
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			tr.Close()
			return nodes, err
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes[1:] {
		if err := n.Bootstrap(ctx, nodes[0].Addr()); err != nil {
			return nodes, fmt.Errorf("bootstrap %v: %w", n.Addr(), err)
		}
	}
	return nodes, nil
}

// demo is the running network and the names it prints for the nodes.
type demo struct {
	ctx   context.Context
	nodes []*coraldht.Node
	name  map[coraldht.ID]string
}

// printTables prints each node's level-0 routing table size.
func (d *demo) printTables() {
	fmt.Println("Nodes and their level-0 routing tables after joining through N1:")
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\taddress\tID\tcontacts\tRTTs measured")
	for _, n := range d.nodes {
		measured := 0
		for _, c := range n.RoutingTable(0) {
			if c.RTT > 0 {
				measured++
			}
		}
		fmt.Fprintf(tw, "  %s\t%v\t%s…\t%d\t%d\n", d.name[n.ID()], n.Addr(), n.ID().Short(), len(n.RoutingTable(0)), measured)
	}
	tw.Flush()
}

// putAndGet stores a reference at one node and reads it back from the node
// farthest from the key that does not hold it; then looks up a key nobody
// stored.
func (d *demo) putAndGet() error {
	ctx, nodes, name := d.ctx, d.nodes, d.name
	url := "http://www.example.com/logo.png"
	key1 := coraldht.KeyFor(url)
	writer := nodes[1]
	fmt.Printf("\nPut: %s stores a reference to itself under SHA-1(%q) = %s…\n", name[writer.ID()], url, key1.Short())
	pr, err := writer.Put(ctx, key1, []byte(writer.Addr().String()), time.Hour, 0)
	if err != nil {
		return fmt.Errorf("put: %w", err)
	}
	fmt.Printf("  forward phase: %d nodes answered (%d RPCs); stored on %s\n", pr.Hops, pr.RPCs, placements(pr.Stored, name))
	fmt.Printf("  nodes by XOR distance to the key: %s\n", byDistance(nodes, key1, name))

	// Read from the node farthest from the key that does not hold it.
	reader := writer
	for _, n := range nodes {
		holds := false
		for _, p := range pr.Stored {
			holds = holds || p.Node.ID == n.ID()
		}
		if !holds && n != writer && (reader == writer || coraldht.CompareDistance(key1, n.ID(), reader.ID()) > 0) {
			reader = n
		}
	}
	gr, err := reader.Get(ctx, key1, 0)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	fmt.Printf("\nGet: %s looks the key up: %d nodes answered; %s returned %q (TTL left %v)\n",
		name[reader.ID()], gr.Hops, name[gr.From.ID], gr.Values[0].Data, gr.Values[0].TTL.Round(time.Second))

	if _, err := reader.Get(ctx, coraldht.KeyFor("http://www.example.com/never-cached"), 0); !errors.Is(err, coraldht.ErrNotFound) {
		return fmt.Errorf("get of an unknown key: %v", err)
	}
	fmt.Println("  a key nobody stored: coraldht.ErrNotFound, after visiting the nodes nearest it")
	return nil
}

// flashCrowd has every node put+get a reference to itself under one key at
// once, prints who found whom, and returns how many saw no reference (and
// so would fetch from the origin).
func (d *demo) flashCrowd() int {
	flash := coraldht.KeyFor("http://www.example.com/flash-crowd.html")
	fmt.Printf("\nPut+get: all %d nodes miss the same URL at the same moment and put+get a reference to themselves\n", len(d.nodes))
	type outcome struct {
		node string
		res  coraldht.PutGetResult
	}
	results := make([]outcome, len(d.nodes))
	var wg sync.WaitGroup
	for i, n := range d.nodes {
		wg.Go(func() {
			res, err := n.PutGet(d.ctx, flash, []byte(d.name[n.ID()]), 20*time.Second, 0)
			if err != nil {
				fmt.Fprintf(os.Stderr, "put+get on %s: %v\n", d.name[n.ID()], err)
			}
			results[i] = outcome{d.name[n.ID()], res}
		})
	}
	wg.Wait()
	first := 0
	for _, o := range results {
		if len(o.res.Values) == 0 {
			first++
			fmt.Printf("  %-4s saw no reference: it fetches from the origin\n", o.node)
			continue
		}
		var peers []string
		for _, v := range o.res.Values {
			peers = append(peers, string(v.Data))
		}
		slices.Sort(peers)
		fmt.Printf("  %-4s found %s (at %s): it fetches from a peer\n", o.node, strings.Join(peers, ","), d.name[o.res.From.ID])
	}
	fmt.Printf("  origin fetches: %d\n", first)
	return first
}

// printTraffic sums every node's RPC and drop counters.
func (d *demo) printTraffic() {
	var in, out, drops uint64
	for _, n := range d.nodes {
		s := n.Stats()
		in += s.RequestsIn.Total()
		out += s.RequestsOut.Total()
		dr := s.Drops
		drops += dr.BadAuth + dr.Malformed + dr.Replay + dr.Stale + dr.Oversize
	}
	fmt.Printf("\nTraffic: %d requests sent, %d received, %d datagrams dropped\n", out, in, drops)
}

func placements(ps []coraldht.Placement, name map[coraldht.ID]string) string {
	var s []string
	for _, p := range ps {
		s = append(s, name[p.Node.ID])
	}
	return strings.Join(s, " and ")
}

func byDistance(nodes []*coraldht.Node, key coraldht.ID, name map[coraldht.ID]string) string {
	ids := make([]coraldht.ID, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID()
	}
	slices.SortFunc(ids, func(a, b coraldht.ID) int { return coraldht.CompareDistance(key, a, b) })
	var s []string
	for _, id := range ids {
		s = append(s, name[id])
	}
	return strings.Join(s, " < ")
}
