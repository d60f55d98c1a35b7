package coralcaddy

import (
	"context"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/host"
)

func TestAppConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  App
		want string
	}{
		{"bad listen", App{Listen: "nowhere"}, "want IP:PORT"},
		{"bad advertise", App{Listen: "127.0.0.2:4000", Advertise: "x"}, "advertise"},
		{"bad bootstrap", App{Listen: "127.0.0.2:4000", Bootstrap: []string{"127.0.0.3"}}, "bootstrap"},
		{"no key off loopback", App{Listen: "192.0.2.1:4000"}, "key is required"},
		{"bad cluster level", App{Listen: "127.0.0.2:4000", Clusters: map[string]string{"x": "a"}}, "not a number"},
		{"cluster level too high", App{Listen: "127.0.0.2:4000", Clusters: map[string]string{"5": "a"}}, "Pins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.app.nodeOptions()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := (&App{Listen: "127.0.0.2:4000"}).nodeOptions(); err != nil {
		t.Errorf("a loopback node without a key: %v", err)
	}
}

// TestAppProvisionErrors: the key file is read when the node starts.
func TestAppProvisionErrors(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	a := &App{Listen: "127.0.3.72:4000", KeyFile: "/nonexistent/key"}
	if err := a.Provision(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing key file: %v", err)
	}
}

// TestAppShareAndRestart: two apps with the same node settings share the
// node (as across a reload); an app with other settings restarts it on the
// same address, and the older apps' cleanup leaves it running.
func TestAppShareAndRestart(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	provision := func(a *App) *App {
		t.Helper()
		if err := a.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		return a
	}
	const listen = "127.0.3.73:4000"
	a1 := provision(&App{Listen: listen})
	a2 := provision(&App{Listen: listen})
	if a1.Node() != a2.Node() || !a2.Joined() {
		t.Fatal("the same settings did not share the node")
	}
	first := a1.Node()
	a3 := provision(&App{Listen: listen, Clusters: map[string]string{"2": "rack"}})
	if a3.Node() == first || !a3.Node().Levels()[2].Pinned || a3.Node().Addr() != first.Addr() {
		t.Fatal("changed settings did not restart the node in place")
	}
	if a1.Node() != a3.Node() {
		t.Error("the older app does not follow the restarted node")
	}
	a1.Cleanup()
	a2.Cleanup()
	if n := nodeAt(listen); n != a3.Node() {
		t.Errorf("running %v, want the restarted node", n)
	}
	a3.Cleanup()
	if nodeAt(listen) != nil {
		t.Error("a node still runs after every app was cleaned up")
	}
}

// nodeAt is the node running on listen.
func nodeAt(listen string) *coraldht.Node {
	for _, i := range host.Running() {
		if i.Listen().String() == listen {
			return i.Node()
		}
	}
	return nil
}
