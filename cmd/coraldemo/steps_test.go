//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/coralcdn/coral/internal/lab/demonet"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// fakeNet is a demo network as tryCommands sees it, with nodes nodes in the
// usual two regions; nothing runs.
func fakeNet(nodes int) *demonet.Net {
	n := &demonet.Net{
		Layout:     demonet.Layout{Prefix: netip.MustParsePrefix("127.0.184.0/24")},
		Dir:        "/run/demo",
		CARoot:     "/run/demo/ca/root.crt",
		OriginHost: demonet.OriginName,
	}
	n.Resolvers = []*demonet.Resolver{{Resolver: &resolvers.Resolver{Kind: resolvers.Unbound, Addr: n.Layout.Resolver(0)}}}
	for i := range nodes {
		n.Nodes = append(n.Nodes, &demonet.Node{
			Addr:      n.Layout.Node(i),
			Region:    demonet.Region(i, nodes),
			StatusURL: fmt.Sprintf("http://%s:%d/coral/status/", n.Layout.Node(i), demonet.PortAdmin),
		})
	}
	return n
}

// TestCrowdStepVisitsEveryKindOfSource checks the demo's central step: one
// object asked at the first east node, a second east node, a west node and
// the second east node again must come from the origin, a level-2 peer, a
// level-1 peer and the local cache, in that order.
func TestCrowdStepVisitsEveryKindOfSource(t *testing.T) {
	n := fakeNet(6)
	var crowd *step
	steps := tryCommands(n)
	for i := range steps {
		if strings.HasPrefix(steps[i].what, "One image asked") {
			crowd = &steps[i]
		}
	}
	if crowd == nil {
		t.Fatal("no crowd step")
	}
	if !strings.Contains(crowd.cmd, "for ip in 127.0.184.10 127.0.184.11 127.0.184.13 127.0.184.11; do") {
		t.Errorf("crowd step visits the wrong nodes:\n%s", crowd.cmd)
	}
	out := "127.0.184.10 200 5 bytes  coral; fwd=uri-miss; detail=\"origin\"\n" +
		"127.0.184.11 200 5 bytes  coral; fwd=uri-miss; detail=\"peer-l2\"\n" +
		"127.0.184.13 200 5 bytes  coral; fwd=uri-miss; detail=\"peer-l1\"\n" +
		"127.0.184.11 200 5 bytes  coral; hit; detail=\"local\"\n"
	if err := crowd.check(out); err != nil {
		t.Errorf("the expected answers fail the check: %v", err)
	}
	swapped := strings.Replace(strings.Replace(out, "peer-l2", "PEER", 1), "peer-l1", "peer-l2", 1)
	if err := crowd.check(strings.Replace(swapped, "PEER", "peer-l1", 1)); err == nil {
		t.Error("answers from the wrong levels pass the check")
	}
}

// TestStepsArePrintable checks that every step has a description, a command
// and a check, for networks of the smallest and the default size.
func TestStepsArePrintable(t *testing.T) {
	for _, nodes := range []int{2, 6} {
		steps := tryCommands(fakeNet(nodes))
		if len(steps) < 8 {
			t.Fatalf("%d nodes: %d steps", nodes, len(steps))
		}
		for i, s := range steps {
			if s.what == "" || s.cmd == "" || s.check == nil {
				t.Errorf("%d nodes: step %d incomplete: %+v", nodes, i, s)
			}
		}
	}
}
