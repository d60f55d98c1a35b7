package coralcaddy

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/abuse"
)

// TestProxyLoad: the load the node publishes is, part by part, the
// largest of the handlers': the bandwidth budget used, the requests in
// flight of load_requests; a handler without a budget or requests adds
// nothing.
func TestProxyLoad(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	budget := abuse.NewFairBudget(1000, time.Hour, 0, 0)
	budget.Charge("www.example.com", func() time.Time { return now })(870)
	busy := new(atomic.Int64)
	busy.Store(300)
	idle := new(atomic.Int64)
	handlers := []*Handler{
		{abuse: &abuse.Controls{Budget: budget}, inflight: idle},
		{LoadRequests: 400, inflight: busy},
		{}, // not provisioned: nothing
	}
	got := proxyLoad(handlers, now)
	want := coraldht.Load{Known: true, Bandwidth: 87, Requests: 75}
	if got != want {
		t.Errorf("load %+v, want %+v", got, want)
	}
	busy.Store(5000) // beyond the scale
	handlers[1].LoadRequests = 0
	if got := proxyLoad(handlers, now); got.Requests != 255 || got.Percent() != 255 {
		t.Errorf("5000 requests of the default 1024: %+v, want 255 %%", got)
	}
	if got := proxyLoad(nil, now); !got.Known || got.Percent() != 0 {
		t.Errorf("no handlers: %+v", got)
	}
}
