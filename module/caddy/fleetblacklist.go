package coralcaddy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/prometheus/client_golang/prometheus"
)

// The fleet-wide blacklist in Caddy: coral_proxy's fleet_blacklist
// option (one abuse.FleetList per process and configuration of it,
// shared by the handlers and kept across reloads that leave it as it
// is), the coral_blacklist handler that serves the list in force to
// other nodes, the admin API's /coral/blacklist, and its metrics.

// FleetBlacklist configures the fleet-wide blacklist of coral_proxy: a
// list the operator signs with a publisher key (`caddy coral-blacklist
// sign`), fetched from Sources every Poll, verified against KeyFile,
// never replaced by an older version, and kept in StateFile across
// restarts. Origins it names are refused with 403, as are those of the
// local Blacklist file: both apply.
type FleetBlacklist struct {
	// KeyFile holds the publisher public keys whose lists are trusted
	// (`caddy coral-blacklist keygen` writes one; two lines during a
	// rotation). Required. It must not be writable by group or others.
	KeyFile string `json:"key_file,omitempty"`
	// KeySHA256 is the key file's SHA-256 when the Caddyfile was adapted,
	// so that `caddy reload` sees a new key in the same file.
	KeySHA256 string `json:"key_sha256,omitempty"`
	// Sources are http or https URLs the list is fetched from: the
	// publisher's web server, other nodes' coral_blacklist handlers, or
	// both; the newest valid list any of them has wins. Default: none
	// (lists arrive through the admin API's POST /coral/blacklist).
	Sources []string `json:"sources,omitempty"`
	// Poll is how often the sources are fetched. Default 1m.
	Poll caddy.Duration `json:"poll,omitempty"`
	// StateFile keeps the last good list across restarts. Default
	// "coral-blacklist.signed" in Caddy's data directory.
	StateFile string `json:"state_file,omitempty"`
}

// fleetLists holds the running fleet lists by their configuration, so a
// reload that keeps the configuration keeps the list and its fetching.
var fleetLists = caddy.NewUsagePool()

type fleetListEntry struct{ *abuse.FleetList }

func (e fleetListEntry) Destruct() error {
	e.Close()
	return nil
}

// provisionFleet takes (or starts) the fleet list h's configuration
// names; nil if none. Under `caddy validate` it only checks the keys.
func (h *Handler) provisionFleet() (*abuse.FleetList, error) {
	fb := h.FleetBlacklist
	if fb == nil {
		return nil, nil
	}
	if fb.KeyFile == "" {
		return nil, errors.New("coral_proxy: fleet_blacklist: a publisher key file is required")
	}
	keys, err := abuse.LoadPublisherPublicKeys(fb.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("coral_proxy: fleet_blacklist: %w", err)
	}
	state := fb.StateFile
	if state == "" {
		state = filepath.Join(caddy.AppDataDir(), "coral-blacklist.signed")
	}
	if validating {
		for _, src := range fb.Sources {
			if err := abuse.CheckSourceURL(src); err != nil {
				return nil, wrapFleetErr(err)
			}
		}
		return nil, nil
	}
	cfg := abuse.FleetConfig{Keys: keys, Sources: fb.Sources, Poll: time.Duration(fb.Poll), StateFile: state}
	var fp []string
	for _, k := range keys {
		fp = append(fp, abuse.KeyFingerprint(k))
	}
	id, _ := json.Marshal(struct {
		Keys    []string
		Sources []string
		Poll    caddy.Duration
		State   string
	}{fp, fb.Sources, fb.Poll, state})
	logger := h.logger
	val, _, err := fleetLists.LoadOrNew(string(id), func() (caddy.Destructor, error) {
		cfg.Logf = func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) }
		f, err := abuse.NewFleetList(cfg)
		if err != nil {
			return nil, wrapFleetErr(err)
		}
		return fleetListEntry{f}, nil
	})
	if err != nil {
		return nil, err
	}
	h.fleetKey = string(id)
	return val.(fleetListEntry).FleetList, nil
}

func wrapFleetErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("coral_proxy: fleet_blacklist: %w", err)
}

// releaseFleet gives up h's hold on its fleet list.
func (h *Handler) releaseFleet() {
	if h.fleetKey != "" {
		_, _ = fleetLists.Delete(h.fleetKey)
		h.fleetKey = ""
	}
}

// runningFleets are the fleet lists of the running handlers, without
// repeats, newest handler first.
func runningFleets() []*abuse.FleetList {
	_, proxies := runningAll()
	var out []*abuse.FleetList
	for i := len(proxies) - 1; i >= 0; i-- {
		if f := proxies[i].fleet; f != nil && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// newestFleet is the running fleet list with the newest list in force,
// else the newest handler's, else nil.
func newestFleet() *abuse.FleetList {
	fs := runningFleets()
	if len(fs) == 0 {
		return nil
	}
	best := fs[0]
	for _, f := range fs[1:] {
		if l := f.List(); l != nil && (best.List() == nil || l.Version > best.List().Version) {
			best = f
		}
	}
	return best
}

// ---------------------------------------------------------------------
// coral_blacklist: the list in force, for other nodes.

func init() { caddy.RegisterModule(BlacklistServer{}) }

// BlacklistServer is the HTTP handler "coral_blacklist": it serves the
// fleet-wide blacklist this node has in force, as its publisher signed
// it, so that other nodes can name this one among their fleet_blacklist
// sources. It answers GET and HEAD (405 otherwise) on any path it is
// given, with an entity tag (a node that has the list gets 304) and
// Cache-Control: no-cache; 404 while this node has no list. The list is
// signed, so a node that serves it can change nothing in it; it names
// the domains refused and the reasons given, so serve it where the
// fleet can reach it, not necessarily the world.
type BlacklistServer struct{}

// CaddyModule returns the Caddy module information.
func (BlacklistServer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.coral_blacklist", New: func() caddy.Module { return new(BlacklistServer) }}
}

// ServeHTTP serves the list in force.
func (BlacklistServer) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, errors.New("coral_blacklist serves GET and HEAD only"))
	}
	f := newestFleet()
	if f == nil {
		return caddyhttp.Error(http.StatusNotFound, errors.New("coral_blacklist: no coral_proxy here has a fleet_blacklist"))
	}
	f.ServeList(w, r)
	return nil
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	coral_blacklist [<matcher>]
func (*BlacklistServer) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("coral_blacklist takes no options")
	}
	return nil
}

// ---------------------------------------------------------------------
// The admin API's /coral/blacklist.

// adminBlacklist is the GET /coral/blacklist document, and POST's answer.
type adminBlacklist struct {
	abuse.FleetStatus
	// Outcome and Error are what became of a list sent with POST.
	Outcome abuse.Outcome `json:"outcome,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// handleBlacklist serves the fleet-wide blacklist:
//
//	GET  /coral/blacklist          the list in force (version, signed,
//	                               expires, entries) and the fetches'
//	                               outcomes
//	GET  /coral/blacklist?signed=1 the list in force as signed
//	POST /coral/blacklist          install the signed list in the body
//	                               (`caddy coral-blacklist publish`): 200
//	                               if it is in force now or already was,
//	                               409 if it is older, 400 if it does not
//	                               verify
//
// A list installed here is saved and served like a fetched one, so the
// nodes that fetch from this one take it within their poll interval.
func (a *AdminAPI) handleBlacklist(w http.ResponseWriter, r *http.Request) error {
	f := newestFleet()
	if f == nil {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("no coral_proxy here has a fleet_blacklist")}
	}
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Get("signed") != "" {
			f.ServeList(w, r)
			return nil
		}
		return adminJSON(w, adminBlacklist{FleetStatus: f.Status()})
	case http.MethodPost:
		body, err := io.ReadAll(io.LimitReader(r.Body, abuse.MaxSignedListBytes+1))
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err}
		}
		outcome, err := f.Install(body, "admin API")
		doc := adminBlacklist{FleetStatus: f.Status(), Outcome: outcome}
		status := http.StatusOK
		if err != nil {
			doc.Error = err.Error()
			status = http.StatusBadRequest
			if outcome == abuse.OutcomeOlder {
				status = http.StatusConflict
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		return json.NewEncoder(w).Encode(doc)
	}
	w.Header().Set("Allow", "GET, POST")
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("%s /coral/blacklist: use GET or POST", r.Method)}
}

// ---------------------------------------------------------------------
// Metrics.

var (
	descBlacklistVersion   = metricDesc("blacklist_version", "Version of the fleet-wide blacklist in force (0: none yet).")
	descBlacklistEntries   = metricDesc("blacklist_entries", "Entries of the fleet-wide blacklist in force.")
	descBlacklistSignedAge = metricDesc("blacklist_signed_age_seconds", "Seconds since the fleet-wide blacklist in force was signed.")
	descBlacklistFetchAge  = metricDesc("blacklist_confirmed_age_seconds", "Seconds since a source last gave the fleet-wide blacklist in force (or it was installed): grows while every source fails.")
	descBlacklistExpires   = metricDesc("blacklist_expires_timestamp_seconds", "When the fleet-wide blacklist in force expires (Unix time): it stays in force, but no node that lacks it will install it.")
	descBlacklistFetches   = metricDesc("blacklist_fetches_total", "Fleet-wide blacklists received, fetched or through the admin API, by outcome (installed, unchanged, older, forged, invalid, unreachable).", "outcome")
)

var blacklistDescs = []*prometheus.Desc{descBlacklistVersion, descBlacklistEntries, descBlacklistSignedAge, descBlacklistFetchAge, descBlacklistExpires, descBlacklistFetches}

// collectFleet reads the fleet list with the newest list in force; a
// Caddy without fleet_blacklist exports none of these.
func collectFleet(ch chan<- prometheus.Metric, now time.Time) {
	f := newestFleet()
	if f == nil {
		return
	}
	s := f.Status()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	gauge(descBlacklistVersion, float64(s.Version))
	gauge(descBlacklistEntries, float64(s.Entries))
	if s.Version > 0 {
		gauge(descBlacklistSignedAge, now.Sub(s.Signed).Seconds())
		gauge(descBlacklistExpires, float64(s.Expires.Unix()))
		if !s.Confirmed.IsZero() {
			gauge(descBlacklistFetchAge, now.Sub(s.Confirmed).Seconds())
		}
	}
	for _, o := range abuse.Outcomes {
		ch <- prometheus.MustNewConstMetric(descBlacklistFetches, prometheus.CounterValue, float64(s.Counts[o]), string(o))
	}
}

// Interface guards.
var (
	_ caddyhttp.MiddlewareHandler = (*BlacklistServer)(nil)
	_ caddyfile.Unmarshaler       = (*BlacklistServer)(nil)
)
