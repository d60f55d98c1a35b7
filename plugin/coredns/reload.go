package coral

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloads and drains, made visible. A CoreDNS reload (SIGUSR1, or the
// reload plugin) that fails keeps the old configuration running and only
// logs "Restart failed"; coral counts it (the old instance's
// OnRestartFailed) so that an alert can see it, and exports the running
// configuration's hash.

var (
	reloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts(opts("reload_success",
		"1 if the last configuration load succeeded, 0 if a reload failed (the previous configuration keeps running).")))
	reloadTime = prometheus.NewGauge(prometheus.GaugeOpts(opts("reload_timestamp_seconds",
		"When the last configuration load happened, successful or not (Unix time).")))
	reloadSuccessTime = prometheus.NewGauge(prometheus.GaugeOpts(opts("reload_success_timestamp_seconds",
		"When the last successful configuration load happened (Unix time).")))
	reloadFailures = prometheus.NewCounter(prometheus.CounterOpts(opts("reload_failures_total",
		"Configuration reloads that failed (SIGUSR1 or the reload plugin); the previous configuration kept running.")))
	configInfo = newGauge("config_info",
		"The running configuration: its hash (the coral blocks' settings and the key files' contents) as a label; always 1.", "hash")
	drainingGauge = newGauge("draining",
		"1 while the node is draining (drain_file exists, or the server is shutting down with drain set): out of the name servers handed out; 0 otherwise.", "node")
)

// restartFailedKey marks a server instance whose OnRestartFailed counts
// failed reloads.
type restartFailedKey struct{}

// configHash is the hash of a coral block's settings and its key files'
// contents: a new key in the same file is a new configuration.
func configHash(cfg *config) string {
	h := sha256.New()
	flat := *cfg
	flat.rrl = nil // a pointer: its value, not its address
	fmt.Fprintf(h, "%+v\n", flat)
	if cfg.rrl != nil {
		fmt.Fprintf(h, "%+v\n", *cfg.rrl)
	}
	for _, f := range append([]string{cfg.node.KeyFile}, cfg.node.AcceptedKeyFiles...) {
		if b, err := os.ReadFile(f); f != "" && err == nil {
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// reloadState is the running configuration's hash.
var reloadState struct {
	sync.Mutex
	hash string
}

// reloadSucceeded records a configuration that started.
func reloadSucceeded(hash string) {
	reloadState.Lock()
	defer reloadState.Unlock()
	if reloadState.hash != "" && reloadState.hash != hash {
		configInfo.DeleteLabelValues(reloadState.hash)
	}
	reloadState.hash = hash
	configInfo.WithLabelValues(hash).Set(1)
	now := float64(time.Now().UnixNano()) / 1e9
	reloadSuccess.Set(1)
	reloadTime.Set(now)
	reloadSuccessTime.Set(now)
}

// reloadFailed records a reload that failed: the running instance's
// OnRestartFailed.
func reloadFailed() error {
	reloadFailures.Inc()
	reloadSuccess.Set(0)
	reloadTime.Set(float64(time.Now().UnixNano()) / 1e9)
	log.Error("reload failed: the previous configuration keeps running (coredns_coral_reload_success 0)")
	return nil
}
