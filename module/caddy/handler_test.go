package coralcaddy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestRequestClientAddr: the client is Caddy's client_ip (which honours
// trusted_proxies) when it is set, else the connection's address.
func TestRequestClientAddr(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.9:4444"
	if got := requestClientAddr(r); got != netip.MustParseAddr("203.0.113.9") {
		t.Errorf("without client_ip: %v", got)
	}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "198.51.100.4"}))
	if got := requestClientAddr(r); got != netip.MustParseAddr("198.51.100.4") {
		t.Errorf("with client_ip: %v", got)
	}
}
