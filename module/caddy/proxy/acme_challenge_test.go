package proxy

import (
	"io"
	"net/http"
	"testing"
)

// TestACMEChallengeNotRelayed: the ACME HTTP-01 path of a Coralized name
// is refused, in every spelling that reaches the same origin path, and
// the origin is never asked: relaying it let any origin owner validate
// its Coralized name (inside the operator's zone) with a public CA.
func TestACMEChallengeNotRelayed(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "token.thumbprint")
	})
	p := startLocalProxy(t, 0, nil)
	for _, path := range []string{
		"/.well-known/acme-challenge/token",
		"/.well-known/acme-challenge",
		"/.WELL-KNOWN/Acme-Challenge/token",
		"/x/../.well-known/acme-challenge/token",
		"/%2ewell-known/acme-challenge/token",
	} {
		if resp, body := p.get(t, origin.coralHost(), path); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", path, resp.StatusCode, body)
		}
	}
	if n := len(origin.requests()); n != 0 {
		t.Errorf("the origin was asked %d times", n)
	}
	// Neighbouring paths are ordinary content.
	for _, path := range []string{"/.well-known/acme-challengex", "/.well-known/security.txt"} {
		if resp, body := p.get(t, origin.coralHost(), path); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %q, want 200", path, resp.StatusCode, body)
		}
	}
}
