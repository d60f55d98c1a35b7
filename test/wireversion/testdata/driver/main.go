// Command driver runs one coraldht node of a recorded previous commit for
// the wire-version test (test/wireversion). It is built against that
// commit's coraldht, so it uses only API that commit has.
//
// Usage: driver -listen IP:PORT -key FILE. It prints "ready ID", then reads
// commands on stdin, one a line, and answers each with one line:
//
//	join IP:PORT     bootstrap → "ok" or "error ..."
//	put NAME VALUE   put VALUE under KeyFor(NAME) → "ok" or "error ..."
//	get NAME         get → "value V1,V2,..." or "error ..."
//	malformed        → "malformed N": authentic datagrams it could not parse
//
// It exits when stdin closes.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

func main() {
	listen := flag.String("listen", "", "UDP address")
	keyFile := flag.String("key", "", "network key file")
	flag.Parse()
	key, err := coraldht.LoadKeyFile(*keyFile)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	tr, err := coraldht.ListenUDP(*listen)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	cfg := coraldht.DefaultConfig()
	cfg.Key = key
	n, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer n.Close()
	fmt.Println("ready", n.ID())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		fmt.Println(run(ctx, n, f))
		cancel()
	}
}

func run(ctx context.Context, n *coraldht.Node, f []string) string {
	switch {
	case f[0] == "join" && len(f) == 2:
		ap, err := netip.ParseAddrPort(f[1])
		if err != nil {
			return "error " + err.Error()
		}
		if err := n.Bootstrap(ctx, ap); err != nil {
			return "error " + err.Error()
		}
		return "ok"
	case f[0] == "put" && len(f) == 3:
		if _, err := n.Put(ctx, coraldht.KeyFor(f[1]), []byte(f[2]), time.Minute); err != nil {
			return "error " + err.Error()
		}
		return "ok"
	case f[0] == "get" && len(f) == 2:
		r, err := n.Get(ctx, coraldht.KeyFor(f[1]))
		if err != nil {
			return "error " + err.Error()
		}
		var vs []string
		for _, v := range r.Values {
			vs = append(vs, string(v.Data))
		}
		return "value " + strings.Join(vs, ",")
	case f[0] == "malformed" && len(f) == 1:
		return fmt.Sprintf("malformed %d", n.Stats().Drops.Malformed)
	}
	return "error unknown command " + strings.Join(f, " ")
}
