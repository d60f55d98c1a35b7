package coralcaddy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRefusalsSayWhy (issue 22, defect 6): a 403 for an origin on a
// private address or on the blacklist carries a short body saying why.
func TestRefusalsSayWhy(t *testing.T) {
	bl := filepath.Join(t.TempDir(), "blacklist")
	if err := os.WriteFile(bl, []byte("blocked.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base := startProxy(t, "blacklist "+bl)
	for host, want := range map[string]string{
		"10.0.0.1.nyud.test":            "origin address not allowed",
		"www.blocked.example.nyud.test": "blacklist",
	} {
		resp, body := get(t, base, host, "/")
		if resp.StatusCode != 403 || !strings.Contains(string(body), want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("%s: %d %q (%s), want 403 with a body saying %q", host, resp.StatusCode, body, resp.Header.Get("Content-Type"), want)
		}
	}
}

// TestRefusalLogRateLimited: each cause is logged at the default level,
// at most once per interval, with the count of those held back.
func TestRefusalLogRateLimited(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core)
	saved := refusals
	defer func() { refusals = saved }()
	refusals = newRateLimitedLog(time.Hour)
	for range 3 {
		logRefusal(logger, causePeer, "skipped a peer")
	}
	logRefusal(logger, causeOrigin, "refused an origin")
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines logged, want one per cause", n)
	}
	refusals.last[causePeer] = time.Now().Add(-2 * time.Hour)
	logRefusal(logger, causePeer, "skipped a peer")
	all := logs.All()
	if len(all) != 3 || all[2].ContextMap()["not_logged_since_last"] != int64(2) {
		t.Errorf("after the interval: %d lines, last %v", len(all), all[len(all)-1].ContextMap())
	}
}

// TestPeerRefusedAddressLabel: a peer skipped for its address is counted
// as refused_address, not other.
func TestPeerRefusedAddressLabel(t *testing.T) {
	read := func() float64 {
		var m dto.Metric
		if err := coralPeerFetches.WithLabelValues("refused_address").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := read()
	(&proxyMetrics{}).PeerFetch(OutcomeRefusedAddress)
	if got := read(); got != before+1 {
		t.Errorf("refused_address = %v, want %v", got, before+1)
	}
}
