package coralcaddy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// Reloads, health and drain: what an operator needs to trust a node and
// change it without fear.
//
//	GET /coral/health   200 "ok" when the node has joined and is not
//	                    draining; 503 and one line saying why otherwise
//	POST /coral/drain   take the node out of DNS answers before stopping it
//	DELETE /coral/drain put it back; GET shows the state
//
// and, in /coral/status and the metrics, the outcome of the last
// configuration load (success, time, the running configuration's hash,
// failures since the process started).

// configDigest is a configuration's hash: the coral app's and the
// coral_proxy handlers' settings and the contents of the files they read
// (the key file, blacklists), so that a changed key shows as a changed
// hash although the Caddyfile is the same.
type configDigest struct {
	mu    sync.Mutex
	parts []string
}

func (d *configDigest) add(kind string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(err.Error())
	}
	d.addPart(kind, b)
}

// addFile adds a file's contents (or that it could not be read).
func (d *configDigest) addFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		b = []byte("unreadable")
	}
	d.addPart("file "+path, b)
}

func (d *configDigest) addPart(kind string, b []byte) {
	if d == nil {
		return
	}
	sum := sha256.Sum256(b)
	d.mu.Lock()
	d.parts = append(d.parts, kind+" "+hex.EncodeToString(sum[:]))
	d.mu.Unlock()
}

// sum is the hash's first 16 hex digits; the order of the parts does not
// matter.
func (d *configDigest) sum() string {
	if d == nil {
		return ""
	}
	d.mu.Lock()
	parts := slices.Clone(d.parts)
	d.mu.Unlock()
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:8])
}

// fileSHA256 is the hex SHA-256 of a file's contents, "" if it cannot be
// read: what the Caddyfile adapter records beside a key file or a
// blacklist.
func fileSHA256(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keyFilesSHA256 is what the Caddyfile adapter records beside the key
// files: fileSHA256 of one file, so a configuration with one key adapts
// as before; for several, the SHA-256 of their digests in order.
func keyFilesSHA256(paths []string) string {
	if len(paths) == 1 {
		return fileSHA256(paths[0])
	}
	var all strings.Builder
	for _, p := range paths {
		all.WriteString(fileSHA256(p) + "\n")
	}
	sum := sha256.Sum256([]byte(all.String()))
	return hex.EncodeToString(sum[:])
}

// reloadLog is the outcome of the configuration loads this process has
// seen reach the coral app.
type reloadLog struct {
	mu       sync.Mutex
	seen     bool
	ok       bool
	at       time.Time // the last load, successful or not
	okAt     time.Time // the last successful one
	hash     string    // the running configuration's
	failures uint64
	err      string // the last failure's cause
}

var reloads reloadLog

func (r *reloadLog) succeeded(hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen, r.ok, r.hash, r.err = true, true, hash, ""
	r.at = time.Now()
	r.okAt = r.at
}

func (r *reloadLog) failed(hash string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen, r.ok = true, false
	r.at = time.Now()
	r.failures++
	r.err = err.Error()
	if hash != "" {
		r.err += " (configuration " + hash + ")"
	}
}

// failureCount is how many loads have failed so far.
func (r *reloadLog) failureCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}

// adminReload is the "reload" object of /coral/status.
type adminReload struct {
	OK          bool       `json:"ok"`                     // the last load succeeded
	Time        time.Time  `json:"time"`                   // of the last load
	LastSuccess *time.Time `json:"last_success,omitempty"` // of the last successful load
	ConfigHash  string     `json:"config_hash"`            // the running configuration's
	Failures    uint64     `json:"failures"`               // since the process started
	Error       string     `json:"error,omitempty"`        // the last load's, when it failed
}

func (r *reloadLog) status() *adminReload {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen {
		return nil
	}
	st := &adminReload{OK: r.ok, Time: r.at, ConfigHash: r.hash, Failures: r.failures, Error: r.err}
	if !r.okAt.IsZero() {
		t := r.okAt
		st.LastSuccess = &t
	}
	return st
}

// draining reports whether the app's node is draining.
func (a *App) draining() bool {
	h := a.handle()
	return h != nil && h.Draining()
}

// health is what /coral/health answers: ok, or why not.
func health() (ok bool, why string) {
	a, e := runningApp()
	switch {
	case a == nil:
		return false, "no coral app is running"
	case a.draining():
		return false, "draining (POST /coral/drain); DELETE /coral/drain puts the node back"
	case !e.Joined():
		return false, "not joined: no bootstrap node has answered yet (check UDP reachability and that the network key matches)"
	}
	return true, "ok"
}

func (a *AdminAPI) handleHealth(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use GET", r.Method)}
	}
	ok, why := health()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	if r.Method == http.MethodGet {
		fmt.Fprintln(w, why)
	}
	return nil
}

// adminDrain is the /coral/drain document.
type adminDrain struct {
	Draining bool `json:"draining"`
}

var errNoApp = errors.New("no coral app is running")

func (a *AdminAPI) handleDrain(w http.ResponseWriter, r *http.Request) error {
	app, _ := runningApp()
	if app == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errNoApp}
	}
	h := app.handle()
	if h == nil {
		return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errNoApp}
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost, http.MethodDelete:
		on := r.Method == http.MethodPost
		if err := h.SetDraining(on); err != nil {
			return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
		}
		if on {
			app.logger.Warn("draining: the node no longer offers its HTTP proxy to the network; DNS stops handing it out within check_interval + live_within")
		} else {
			app.logger.Info("drain ended: the node offers its HTTP proxy again")
		}
		app.current() // the restarted node, with the purge handler
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use POST to drain, DELETE to undo", r.Method)}
	}
	return adminJSON(w, adminDrain{Draining: h.Draining()})
}
