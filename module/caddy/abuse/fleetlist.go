package abuse

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultFleetPoll is how often a node fetches the fleet's signed list
// from its sources. A fetch of an unchanged list is a conditional GET
// answered 304, so a minute costs a list server with a thousand nodes
// some 17 tiny requests a second; an origin that asks to be left alone is
// refused fleet-wide within a minute of the list's publication.
const DefaultFleetPoll = time.Minute

// DefaultFleetFetchTimeout bounds one fetch of the list from one source.
const DefaultFleetFetchTimeout = 10 * time.Second

// FleetConfig configures a FleetList.
type FleetConfig struct {
	// Keys are the publisher keys whose lists are trusted. Required.
	Keys []ed25519.PublicKey
	// Sources are the http and https URLs the list is fetched from: the
	// publisher's server, other nodes' coral_blacklist handlers, or both.
	// None: the list arrives only through Install (the admin API).
	Sources []string
	// Poll is how often the sources are fetched; DefaultFleetPoll if ≤ 0.
	Poll time.Duration
	// StateFile keeps the last good list across restarts ("": none).
	StateFile string
	// Client makes the fetches; a client with DefaultFleetFetchTimeout
	// if nil.
	Client *http.Client
	// Logf receives what changed and what went wrong (nil discards).
	Logf func(format string, args ...any)
	// Now is the clock (time.Now if nil).
	Now func() time.Time

	manual bool // tests: no polling, FetchAll by hand
}

// Outcome is what became of one list a node received (fetched, or
// installed through the admin API).
type Outcome string

// The outcomes, the label values of the fetch counter.
const (
	OutcomeInstalled   Outcome = "installed"   // a newer list, now in force
	OutcomeUnchanged   Outcome = "unchanged"   // the list in force (or a 304 for it)
	OutcomeOlder       Outcome = "older"       // an older version (or the same version, different content): refused
	OutcomeForged      Outcome = "forged"      // not signed by a trusted key: refused
	OutcomeInvalid     Outcome = "invalid"     // malformed, expired or signed in the future: refused
	OutcomeUnreachable Outcome = "unreachable" // no answer, an HTTP error, or a body too large
)

// Outcomes lists every outcome, in a fixed order.
var Outcomes = []Outcome{OutcomeInstalled, OutcomeUnchanged, OutcomeOlder, OutcomeForged, OutcomeInvalid, OutcomeUnreachable}

// FleetList is the fleet-wide blacklist as one node holds it: the last
// good signed list, fetched from its sources every poll interval,
// verified, never replaced by an older version, and kept (in memory and
// in its state file) whatever goes wrong with a later fetch.
//
// A list once in force stays in force until a newer one replaces it,
// also past its own expiry: dropping it would serve sites that asked not
// to be. Its expiry only stops a node from installing it (an old list
// replayed to a node that never had it); the age metrics tell an
// operator that a node is stuck on an old list.
type FleetList struct {
	cfg   FleetConfig
	cur   atomic.Pointer[fleetState]
	count [6]atomic.Uint64 // by Outcome, in the order of Outcomes

	mu        sync.Mutex // serializes installing; guards the fields below
	confirmed time.Time  // when a source last gave the list in force (or a newer one)
	installed time.Time  // when the list in force was installed
	etags     map[string]string
	problems  map[string]string // per source, the last problem logged, so each is logged once

	lastMu sync.Mutex // guards last and bySource
	last   SourceStatus
	bySrc  map[string]*SourceStatus

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// fleetState is the list in force and the set it makes.
type fleetState struct {
	list *SignedList
	set  *blockSet
}

// NewFleetList loads the state file's list, if there is one and it
// verifies, and fetches the sources at once and then every poll interval
// until Close. Only a bad configuration is an error: an unreadable or
// unverifiable state file is logged, and the node starts without a list
// (until its first fetch).
func NewFleetList(cfg FleetConfig) (*FleetList, error) {
	if len(cfg.Keys) == 0 {
		return nil, errors.New("blacklist: fleet list: no publisher key")
	}
	for _, s := range cfg.Sources {
		if err := CheckSourceURL(s); err != nil {
			return nil, err
		}
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultFleetPoll
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: DefaultFleetFetchTimeout}
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &FleetList{cfg: cfg, etags: map[string]string{}, problems: map[string]string{}, bySrc: map[string]*SourceStatus{}, done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.loadState()
	if len(cfg.Sources) > 0 && !cfg.manual {
		go f.poll()
	} else {
		close(f.done)
	}
	return f, nil
}

// CheckSourceURL checks a source: an absolute http or https URL.
func CheckSourceURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("blacklist: source %q: want an http:// or https:// URL", s)
	}
	return nil
}

// loadState installs the list of the state file, if it verifies. Its
// times are not checked: it was good when it was installed, and a list
// in force stays in force.
func (f *FleetList) loadState() {
	if f.cfg.StateFile == "" {
		return
	}
	raw, err := readLimited(f.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var l *SignedList
		if l, err = ParseSignedList(raw, f.cfg.Keys); err == nil {
			f.cur.Store(&fleetState{list: l, set: l.blockSet()})
			// Confirmed when it was saved: the last a source gave it, as
			// far as a restarted node knows.
			if fi, serr := os.Stat(f.cfg.StateFile); serr == nil {
				f.confirmed, f.installed = fi.ModTime(), fi.ModTime()
			}
			f.cfg.Logf("coral_proxy: fleet blacklist: version %d (signed %s, %d %s) from %s",
				l.Version, l.Signed.Format(time.RFC3339), len(l.Entries), plural(len(l.Entries), "entry", "entries"), f.cfg.StateFile)
			return
		}
	}
	f.cfg.Logf("coral_proxy: fleet blacklist: state file %s: %v; starting without a list until a fetch gets one", f.cfg.StateFile, err)
}

func readLimited(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxSignedListBytes+1))
	if err == nil && len(b) > MaxSignedListBytes {
		err = fmt.Errorf("larger than %d bytes", MaxSignedListBytes)
	}
	return b, err
}

// Blocked reports whether host is on the list in force. Safe for
// concurrent use; takes no lock.
func (f *FleetList) Blocked(host string) bool {
	if f == nil {
		return false
	}
	st := f.cur.Load()
	return st != nil && st.set.match(host, f.cfg.Now)
}

// List is the list in force, or nil.
func (f *FleetList) List() *SignedList {
	if f == nil {
		return nil
	}
	if st := f.cur.Load(); st != nil {
		return st.list
	}
	return nil
}

// Install verifies a list received from source and puts it in force if
// it is newer than the one in force. It returns what became of it, and
// for a refusal, why.
func (f *FleetList) Install(raw []byte, source string) (Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	outcome, err := f.install(raw, source)
	f.record(outcome, source, err)
	return outcome, err
}

func (f *FleetList) install(raw []byte, source string) (Outcome, error) {
	l, err := ParseSignedList(raw, f.cfg.Keys)
	switch {
	case errors.Is(err, ErrListSignature):
		return OutcomeForged, err
	case err != nil:
		return OutcomeInvalid, err
	}
	now := f.cfg.Now()
	cur := f.List()
	if cur != nil && l.Version <= cur.Version {
		if l.Version == cur.Version && bytes.Equal(l.Raw, cur.Raw) {
			f.confirmed = now
			return OutcomeUnchanged, nil
		}
		return OutcomeOlder, fmt.Errorf("blacklist: version %d from %s is not newer than version %d in force; refused", l.Version, source, cur.Version)
	}
	if err := l.CheckTimes(now); err != nil {
		return OutcomeInvalid, err
	}
	f.cur.Store(&fleetState{list: l, set: l.blockSet()})
	f.confirmed, f.installed = now, now
	from := "none"
	if cur != nil {
		from = fmt.Sprintf("version %d", cur.Version)
	}
	f.cfg.Logf("coral_proxy: fleet blacklist: version %d (signed %s, %d %s) from %s in force, replacing %s",
		l.Version, l.Signed.Format(time.RFC3339), len(l.Entries), plural(len(l.Entries), "entry", "entries"), source, from)
	if err := f.saveState(l.Raw); err != nil {
		f.cfg.Logf("coral_proxy: fleet blacklist: saving version %d to %s: %v (it is in force; a restart would start from the one saved before)", l.Version, f.cfg.StateFile, err)
	}
	return OutcomeInstalled, nil
}

// saveState writes the list to the state file, whole (a new file renamed
// over the old), so a restart finds it.
func (f *FleetList) saveState(raw []byte) error {
	if f.cfg.StateFile == "" {
		return nil
	}
	dir := filepath.Dir(f.cfg.StateFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(f.cfg.StateFile)+".*.new")
	if err != nil {
		return err
	}
	_, err = tmp.Write(raw)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.cfg.StateFile)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// record counts an outcome and logs a problem with a source once, until
// it changes.
func (f *FleetList) record(o Outcome, source string, err error) {
	for i, x := range Outcomes {
		if x == o {
			f.count[i].Add(1)
		}
	}
	f.lastMu.Lock()
	src := f.bySrc[source]
	if src == nil {
		src = &SourceStatus{Source: source}
		f.bySrc[source] = src
	}
	src.Received++
	src.LastOutcome, src.LastAt, src.LastError = o, f.cfg.Now(), ""
	if err != nil {
		src.LastError = err.Error()
	}
	f.last = *src
	f.lastMu.Unlock()
	msg := ""
	if err != nil && o != OutcomeOlder {
		// An older list is normal: a peer that has not yet caught up.
		msg = err.Error()
	}
	switch prev := f.problems[source]; {
	case msg != "" && msg != prev:
		keep := "no list"
		if l := f.List(); l != nil {
			keep = fmt.Sprintf("version %d", l.Version)
		}
		f.cfg.Logf("coral_proxy: fleet blacklist: %s: %s: %v; keeping %s", source, o, err, keep)
	case msg == "" && prev != "":
		f.cfg.Logf("coral_proxy: fleet blacklist: %s: good again", source)
	}
	f.problems[source] = msg
}

// Close stops the fetching and waits for a fetch under way. It may be
// called more than once.
func (f *FleetList) Close() {
	if f == nil {
		return
	}
	f.cancel()
	<-f.done
}

func (f *FleetList) poll() {
	defer close(f.done)
	t := time.NewTicker(f.cfg.Poll)
	defer t.Stop()
	for {
		f.FetchAll(f.ctx)
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FetchAll fetches every source once, at the same time, and installs
// what they give.
func (f *FleetList) FetchAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range f.cfg.Sources {
		wg.Go(func() { f.fetch(ctx, s) })
	}
	wg.Wait()
}

// fetch gets the list from one source with a conditional GET.
func (f *FleetList) fetch(ctx context.Context, source string) {
	body, notModified, err := f.get(ctx, source)
	if ctx.Err() != nil {
		return // closing: not the source's fault
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var o Outcome
	switch {
	case err != nil:
		o = OutcomeUnreachable
	case notModified:
		// The source still has the list it gave last: the one in force,
		// or one older than a list that came since from elsewhere.
		o = OutcomeOlder
		if l := f.List(); l != nil && f.etags[source] == listETag(l.Raw) {
			o, f.confirmed = OutcomeUnchanged, f.cfg.Now()
		}
	default:
		o, err = f.install(body, source)
		if o == OutcomeInstalled || o == OutcomeUnchanged {
			f.etags[source] = listETag(body)
		}
	}
	f.record(o, source, err)
}

func (f *FleetList) get(ctx context.Context, source string) (body []byte, notModified bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
	if err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	if etag := f.etags[source]; etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	f.mu.Unlock()
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotModified:
		return nil, true, nil
	default:
		return nil, false, fmt.Errorf("HTTP status %s", resp.Status)
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, MaxSignedListBytes+1))
	if err == nil && len(body) > MaxSignedListBytes {
		err = fmt.Errorf("the answer is larger than %d bytes", MaxSignedListBytes)
	}
	return body, false, err
}

// listETag is the entity tag a list is served with (ServeList) and
// fetched against: its version and its signature's fingerprint, which
// change together with its content.
func listETag(raw []byte) string {
	_, keyID, sig, err := splitSignature(raw)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(`"%s-%x"`, keyID, sig[:12])
}

// ServeList answers a GET or HEAD for the list in force: the signed list
// as published, with an entity tag for conditional requests; 404 while
// the node has none. Nodes fetch it from one another.
func (f *FleetList) ServeList(w http.ResponseWriter, r *http.Request) {
	l := f.List()
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	if l == nil {
		http.Error(w, "no fleet blacklist yet", http.StatusNotFound)
		return
	}
	etag := listETag(l.Raw)
	h.Set("ETag", etag)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	for _, v := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if strings.TrimSpace(v) == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	h.Set("Content-Length", fmt.Sprint(len(l.Raw)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(l.Raw)
	}
}

// FleetStatus is what the admin API and the metrics show of a FleetList.
type FleetStatus struct {
	Version   uint64    `json:"version"` // 0: no list
	Signed    time.Time `json:"signed,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
	Key       string    `json:"key,omitempty"` // the fingerprint of the key that signed it
	Entries   int       `json:"entries"`
	Confirmed time.Time `json:"confirmed,omitzero"` // a source last gave this list (or it was installed)
	Installed time.Time `json:"installed,omitzero"` // it was installed (after a restart: saved)
	// Last is the last list received, from any source.
	Last SourceStatus `json:"last"`
	// Sources are the configured sources and what each gave last, then
	// any other way lists came (the admin API).
	Sources []SourceStatus    `json:"sources"`
	Counts  map[Outcome]int64 `json:"outcomes"`
}

// SourceStatus is what one source gave last.
type SourceStatus struct {
	Source      string    `json:"source"`
	Received    uint64    `json:"received"` // lists (or answers) received from it
	LastOutcome Outcome   `json:"last_outcome,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	LastAt      time.Time `json:"last_at,omitzero"`
}

// Status reports the list in force and the fetches.
func (f *FleetList) Status() FleetStatus {
	s := FleetStatus{Counts: map[Outcome]int64{}}
	if l := f.List(); l != nil {
		s.Version, s.Signed, s.Expires, s.Key, s.Entries = l.Version, l.Signed, l.Expires, l.KeyID, len(l.Entries)
	}
	f.mu.Lock()
	s.Confirmed, s.Installed = f.confirmed, f.installed
	f.mu.Unlock()
	f.lastMu.Lock()
	s.Last = f.last
	for _, src := range f.cfg.Sources {
		if st := f.bySrc[src]; st != nil {
			s.Sources = append(s.Sources, *st)
		} else {
			s.Sources = append(s.Sources, SourceStatus{Source: src})
		}
	}
	for src, st := range f.bySrc {
		if !slices.Contains(f.cfg.Sources, src) {
			s.Sources = append(s.Sources, *st)
		}
	}
	f.lastMu.Unlock()
	for i, o := range Outcomes {
		s.Counts[o] = int64(f.count[i].Load())
	}
	return s
}
