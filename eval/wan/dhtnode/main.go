// Command dhtnode is one Coral DSHT node as a process of its own, with
// nothing but the node: eval/wan's DSHT-only run starts hundreds of them
// on the emulated wide area to measure joining, clustering and lookups at
// the size of the deployed system, and what each costs a machine.
//
//	dhtnode -listen 198.18.3.10:4000 -bootstrap 198.18.0.10:4000,198.18.1.10:4000 \
//	        -key network.key -control 198.18.3.10:8000
//
// The control address serves, for the experiment:
//
//	GET  /status          joined (and how long after start), levels and clusters, counters,
//	                      peak RSS and CPU seconds of the process
//	POST /put?key=K&ttl=D put a value under KeyFor(K)
//	GET  /get?key=K       get it: found, level, hops, RPCs, latency
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

func main() {
	listen := flag.String("listen", "", "UDP address of the node")
	boot := flag.String("bootstrap", "", "bootstrap addresses, comma-separated")
	keyFile := flag.String("key", "", "network key file")
	control := flag.String("control", "", "TCP address of the control API")
	flag.Parse()
	if err := run(*listen, *boot, *keyFile, *control); err != nil {
		fmt.Fprintln(os.Stderr, "dhtnode:", err)
		os.Exit(1)
	}
}

type status struct {
	Addr     string    `json:"addr"`
	Joined   bool      `json:"joined"`
	JoinedMs float64   `json:"joined_after_ms"`
	Levels   []level   `json:"levels"`
	Stats    any       `json:"stats"`
	RSSBytes uint64    `json:"rss_bytes"`
	PeakRSS  uint64    `json:"peak_rss_bytes"`
	CPUSec   float64   `json:"cpu_seconds"`
	Started  time.Time `json:"started"`
}

type level struct {
	Level      int        `json:"level"`
	Cluster    string     `json:"cluster"`
	LogSize    float64    `json:"log_size"`
	Contacts   int        `json:"contacts"`
	Changes    int        `json:"changes"`
	LastChange *time.Time `json:"last_change,omitempty"`
}

func run(listen, boot, keyFile, control string) error {
	started := time.Now()
	key, err := coraldht.LoadKeyFile(keyFile)
	if err != nil {
		return err
	}
	tr, err := coraldht.ListenUDP(listen)
	if err != nil {
		return err
	}
	cfg := coraldht.DefaultConfig()
	cfg.Key = key
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		return err
	}
	defer n.Close()
	var addrs []netip.AddrPort
	for f := range strings.SplitSeq(boot, ",") {
		if f = strings.TrimSpace(f); f != "" {
			a, err := netip.ParseAddrPort(f)
			if err != nil {
				return err
			}
			if a != n.Addr() {
				addrs = append(addrs, a)
			}
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	joined := make(chan time.Duration, 1)
	go func() {
		if len(addrs) == 0 {
			joined <- 0 // the first node: joined by definition
			return
		}
		if n.JoinRetrying(ctx, addrs, nil) == nil {
			joined <- time.Since(started)
		}
	}()
	var joinedAfter time.Duration
	isJoined := false
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		select {
		case d := <-joined:
			joinedAfter, isJoined = d, true
		default:
		}
		st := status{Addr: n.Addr().String(), Joined: isJoined, JoinedMs: float64(joinedAfter) / 1e6, Stats: n.Stats(), Started: started}
		for _, lv := range n.Levels() {
			l := level{Level: lv.Level, Cluster: lv.Cluster.ID.String()[:8], LogSize: lv.Cluster.LogSize, Contacts: lv.Contacts, Changes: lv.Changes}
			if !lv.LastChange.IsZero() {
				t := lv.LastChange
				l.LastChange = &t
			}
			st.Levels = append(st.Levels, l)
		}
		st.RSSBytes, st.PeakRSS = memory()
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			st.CPUSec = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("POST /put", func(w http.ResponseWriter, r *http.Request) {
		ttl, err := time.ParseDuration(r.URL.Query().Get("ttl"))
		if err != nil {
			ttl = time.Hour
		}
		start := time.Now()
		_, err = n.Put(r.Context(), coraldht.KeyFor(r.URL.Query().Get("key")), []byte(n.Addr().String()), ttl)
		writeJSON(w, map[string]any{"ok": err == nil, "ms": float64(time.Since(start)) / 1e6, "error": errString(err)})
	})
	mux.HandleFunc("GET /get", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		res, err := n.Get(r.Context(), coraldht.KeyFor(r.URL.Query().Get("key")))
		writeJSON(w, map[string]any{"found": err == nil && len(res.Values) > 0, "level": res.Level, "hops": res.Hops,
			"rpcs": res.RPCs, "ms": float64(time.Since(start)) / 1e6, "error": errString(err)})
	})
	srv := &http.Server{Addr: control, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	runtime.GC()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// memory is the process's resident set size and its peak (VmRSS, VmHWM).
func memory() (rss, peak uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, f := range []struct {
			prefix string
			dst    *uint64
		}{{"VmRSS:", &rss}, {"VmHWM:", &peak}} {
			if rest, ok := strings.CutPrefix(line, f.prefix); ok {
				if fs := strings.Fields(rest); len(fs) > 0 {
					kb, _ := strconv.ParseUint(fs[0], 10, 64)
					*f.dst = kb << 10
				}
			}
		}
	}
	return rss, peak
}
