package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"
)

func TestOriginGuard(t *testing.T) {
	def := originGuard{}
	allowed := originGuard{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, tc := range []struct {
		ip           string
		def, allowed bool
	}{
		{"93.184.215.14", true, true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true, true},
		{"127.0.0.1", false, true},
		{"::ffff:127.0.0.1", false, true},
		{"10.1.2.3", false, false},
		{"192.168.1.1", false, false},
		{"172.16.0.1", false, false},
		{"100.64.0.1", false, false},
		{"169.254.169.254", false, false}, // cloud metadata
		{"0.0.0.0", false, false},
		{"::1", false, false},
		{"fe80::1", false, false},
		{"fc00::1", false, false},
		{"224.0.0.1", false, false},
		{"255.255.255.255", false, false},
		{"198.18.0.1", false, false},
		// The ranges of issue 12: NAT64 and 6to4 by their IPv4 address,
		// site-local, IETF assignments, documentation.
		{"64:ff9b::7f00:1", false, true},                       // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", false, false},                   // NAT64 of 169.254.169.254
		{"64:ff9b::5db8:d70e", true, true},                     // NAT64 of 93.184.215.14
		{"64:ff9b:1::a00:1", false, false},                     // local-use NAT64
		{"2002:7f00:1::1", false, true},                        // 6to4 of 127.0.0.1
		{"2002:a00:1::1", false, false},                        // 6to4 of 10.0.0.1
		{"2002:5db8:d70e::1", true, true},                      // 6to4 of 93.184.215.14
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", false, false}, // Teredo
		{"fec0::1", false, false},
		{"192.0.0.8", false, false},
		{"192.0.2.1", false, false},
		{"198.51.100.7", false, false},
		{"203.0.113.9", false, false},
		{"2001:db8::1", false, false},
		{"3fff::1", false, false},
		{"::7f00:1", false, false}, // IPv4-compatible
		{"100::1", false, false},
		{"fe80::1%eth0", false, false},
		{"::ffff:10.0.0.1", false, false},
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := def.permitted(ip); got != tc.def {
			t.Errorf("default %s: %v, want %v", tc.ip, got, tc.def)
		}
		if got := allowed.permitted(ip); got != tc.allowed {
			t.Errorf("allow 127/8 %s: %v, want %v", tc.ip, got, tc.allowed)
		}
	}
}

// TestOriginTransportRefusesLoopback dials a real loopback server through
// the guarded transport, by name too (the check is on the resolved
// address).
func TestOriginTransportRefusesLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, target := range []string{srv.URL, "http://localhost:" + p + "/"} {
		c := &http.Client{Transport: originTransport(originGuard{}, time.Second, time.Second)}
		_, err := c.Get(target)
		if !errors.Is(err, errOriginForbidden) {
			t.Errorf("%s: %v, want errOriginForbidden", target, err)
		}
		c = &http.Client{Transport: originTransport(originGuard{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, time.Second, time.Second)}
		resp, err := c.Get(target)
		if err != nil {
			t.Errorf("%s allowed: %v", target, err)
			continue
		}
		resp.Body.Close()
	}
}

func TestOriginFailures(t *testing.T) {
	synctest.Test(t, testOriginFailures)
}

// testOriginFailures runs in virtual time.
func testOriginFailures(t *testing.T) {
	now := time.Now()
	f := newOriginFailures(3, time.Minute)
	for range 2 {
		f.failed("dead.example")
	}
	if down, _ := f.down("dead.example"); down {
		t.Fatal("down after 2 failures, threshold 3")
	}
	f.failed("dead.example")
	if down, until := f.down("dead.example"); !down || !until.Equal(now.Add(time.Minute)) {
		t.Fatalf("not down after 3 failures: %v %v", down, until)
	}
	time.Sleep(61 * time.Second)
	if down, _ := f.down("dead.example"); down {
		t.Fatal("still down after the hold")
	}
	f.failed("dead.example") // the probe request failed again: down at once
	if down, _ := f.down("dead.example"); !down {
		t.Fatal("one more failure after the hold should re-arm")
	}
	f.succeeded("dead.example")
	if down, _ := f.down("dead.example"); down {
		t.Fatal("down after a success")
	}
	if !isConnectFailure(context.DeadlineExceeded) {
		t.Error("a timeout is a connect failure")
	}
}
