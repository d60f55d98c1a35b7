package proxy

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

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
