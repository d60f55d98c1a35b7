//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// phaseRow is one phase's line of the report.
type phaseRow struct {
	Phase   string `json:"phase"`
	Note    string `json:"note"`
	Skipped bool   `json:"skipped,omitempty"`
	// Seconds since the load started.
	Start float64 `json:"start_s"`
	Done  float64 `json:"done_s"`
	End   float64 `json:"end_s"`

	Requests int `json:"requests"`
	Failures int `json:"failures"`
	// FailureWindow is from the event's start to the last failure.
	FailureWindow float64 `json:"failure_window_s"`
	// BeyondTTL counts failures later than TTLWindow after the event was
	// done.
	BeyondTTL  int            `json:"failures_beyond_ttl_window"`
	Violations int            `json:"violations"`
	ByFailure  map[string]int `json:"failures_by_kind,omitempty"`
	// FailureSample is the first failure of each kind, in full.
	FailureSample map[string]string `json:"failure_sample,omitempty"`
	ByViolated    map[string]int    `json:"violations_by_kind,omitempty"`

	OriginFetches int `json:"origin_fetches"`
	// MaxPerObject is the most origin fetches of one object in the phase;
	// Bound is the most allowed (phase.Bound).
	MaxPerObject int `json:"origin_fetches_max_per_object"`
	Bound        int `json:"origin_fetches_bound"`

	PeerFailed float64 `json:"peer_fetch_failures"`
	PeerOK     float64 `json:"peer_fetches_ok"`
}

// report is the whole run.
type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Params     params              `json:"params"`
	Kernel     string              `json:"kernel"`
	Load       string              `json:"loadavg_before"`
	TTL        int                 `json:"dns_answer_ttl_s"`
	Window     float64             `json:"ttl_window_s"`
	Objects    int                 `json:"objects"`
	// Wanted is how many of the objects the crowd was given (a wave per
	// phase that ran: a skipped phase brings none), Served how many of
	// them reached a client complete, Fetched how many the origin served
	// at least once.
	Wanted  int `json:"objects_wanted"`
	Served  int `json:"objects_served"`
	Fetched int `json:"objects_fetched"`
	// FromNowhere lists the objects a client got complete before the
	// origin had been asked for them once: bytes that came from nowhere.
	FromNowhere []int `json:"objects_served_before_any_origin_fetch,omitempty"`

	Phases []phaseRow `json:"phases"`
	Total  phaseRow   `json:"total"`
	// Timeline has one row per second.
	Timeline []timeBin `json:"timeline"`
	// ViolationDetails lists every violation (empty when the run passed).
	ViolationDetails []result `json:"violation_details,omitempty"`
	// OverBound lists the origin fetches of every object fetched more
	// often than its phase's bound.
	OverBound []originFetch `json:"origin_fetches_over_bound,omitempty"`
	Problems  []string      `json:"problems,omitempty"`
}

type timeBin struct {
	Second        int     `json:"t"`
	Requests      int     `json:"requests"`
	Failures      int     `json:"failures"`
	OriginFetches int     `json:"origin_fetches"`
	PeerFailed    float64 `json:"peer_fetch_failures"`
}

// TTLWindow bounds how long clients may hold a dead proxy's address: the
// resolver's cached answer and the client's each live AnswerTTL, and a
// name server notices a dead proxy within LiveWithin (5 s) and a check
// interval (1 s).
const ttlWindow = 2*coralnet.AnswerTTL + 5 + 1

func buildReport(s *schedule, rec *recorder, smp *sampler, o *origin, p params, end float64) *report {
	rep := &report{Params: p, TTL: coralnet.AnswerTTL, Window: ttlWindow, Objects: p.Objects}
	row := func(name string, from, done, to float64, bound int) phaseRow {
		r := phaseRow{Phase: name, Start: from, Done: done, End: to, Bound: bound,
			ByFailure: map[string]int{}, ByViolated: map[string]int{}, FailureSample: map[string]string{}}
		for _, res := range rec.between(from, to) {
			r.Requests++
			if res.Violation != "" {
				r.Violations++
				r.ByViolated[res.Violation]++
				rep.ViolationDetails = append(rep.ViolationDetails, res)
			}
			if !res.OK && res.Violation == "" {
				r.Failures++
				kind := failureKind(res.Failure)
				if r.ByFailure[kind] == 0 {
					r.FailureSample[kind] = fmt.Sprintf("%.1f s, client %d via %q: %s", res.At, res.Client, res.Proxy, res.Failure)
				}
				r.ByFailure[kind]++
				r.FailureWindow = max(r.FailureWindow, res.At-from)
				if res.At > done+ttlWindow {
					r.BeyondTTL++
				}
			}
		}
		per := map[int]int{}
		for _, f := range o.fetchesSince(from, to) {
			per[f.Object]++
			r.OriginFetches++
		}
		for _, c := range per {
			r.MaxPerObject = max(r.MaxPerObject, c)
		}
		if bound > 0 {
			for _, f := range o.fetchesSince(from, to) {
				if per[f.Object] > bound {
					rep.OverBound = append(rep.OverBound, f)
				}
			}
		}
		r.PeerFailed, r.PeerOK = smp.between(from, to)
		return r
	}
	for i, ph := range s.phases {
		from := ph.Start
		if i == 0 {
			from = 0 // the warm-up includes everything before it
		}
		rep.Phases = append(rep.Phases, row(ph.Name, from, ph.Done, ph.End, ph.Bound))
		rep.Phases[i].Note, rep.Phases[i].Skipped = ph.Note, ph.Skipped
		if ph.Skipped {
			rep.Phases[i].Bound = 0
		}
	}
	rep.Total = row("total", 0, 0, end+1, 0)
	rep.Total.Bound, rep.Total.BeyondTTL, rep.Total.FailureWindow = 0, 0, 0
	rep.ViolationDetails = rep.ViolationDetails[:0]
	for _, ph := range rep.Phases {
		rep.Total.Bound += ph.Bound
	}
	for _, res := range rec.between(0, end+1) {
		if res.Violation != "" {
			rep.ViolationDetails = append(rep.ViolationDetails, res)
		}
	}
	for sec := 0; float64(sec) < end; sec++ {
		b := timeBin{Second: sec}
		for _, res := range rec.between(float64(sec), float64(sec+1)) {
			b.Requests++
			if !res.OK {
				b.Failures++
			}
		}
		b.OriginFetches = len(o.fetchesSince(float64(sec), float64(sec+1)))
		b.PeerFailed, _ = smp.between(float64(sec), float64(sec+1))
		rep.Timeline = append(rep.Timeline, b)
	}
	rep.Wanted = int(s.load.active.Load())
	rep.Served, rep.Fetched, rep.FromNowhere = objectsServed(rec.between(0, end+1), o.fetchesSince(0, end+1))
	rep.Problems = rep.check()
	return rep
}

// objectsServed counts the objects that reached a client complete and the
// objects the origin served, and lists those a client got before the
// origin's first fetch of them began (a fetch is timed as it starts, a
// response as it ends, so every served object must come after one).
func objectsServed(results []result, fetches []originFetch) (served, fetched int, fromNowhere []int) {
	firstFetch := map[int]float64{}
	for _, f := range fetches {
		if at, ok := firstFetch[f.Object]; !ok || f.At < at {
			firstFetch[f.Object] = f.At
		}
	}
	firstOK := map[int]float64{}
	for _, r := range results {
		if at, ok := firstOK[r.Object]; r.OK && (!ok || r.At < at) {
			firstOK[r.Object] = r.At
		}
	}
	for obj, at := range firstOK {
		if f, ok := firstFetch[obj]; !ok || at < f {
			fromNowhere = append(fromNowhere, obj)
		}
	}
	slices.Sort(fromNowhere)
	return len(firstOK), len(firstFetch), fromNowhere
}

// check lists what broke the acceptance: any violation, an object served
// before any origin fetch of it, origin fetches beyond the bound in a
// phase.
func (rep *report) check() []string {
	var out []string
	if rep.Total.Violations > 0 {
		out = append(out, fmt.Sprintf("%d responses broke an invariant: %v", rep.Total.Violations, rep.Total.ByViolated))
	}
	if len(rep.FromNowhere) > 0 {
		out = append(out, fmt.Sprintf("objects %v reached a client before any origin fetch of them", rep.FromNowhere))
	}
	for _, ph := range rep.Phases {
		if !ph.Skipped && ph.MaxPerObject > ph.Bound {
			out = append(out, fmt.Sprintf("phase %s: an object fetched from the origin %d times (bound %d)", ph.Phase, ph.MaxPerObject, ph.Bound))
		}
	}
	return out
}

// failureKind shortens a failure to its class for the counts.
func failureKind(f string) string {
	switch {
	case strings.HasPrefix(f, "dns"):
		return "dns"
	case strings.Contains(f, "connection refused"):
		return "refused"
	case strings.Contains(f, "Client.Timeout"), strings.Contains(f, "timeout"):
		return "timeout"
	case strings.Contains(f, "connection reset"), strings.Contains(f, "EOF"):
		return "reset"
	case strings.HasPrefix(f, "status"):
		return f
	}
	return "other"
}

func (rep *report) print(w io.Writer) {
	fmt.Fprintf(w, "DNS answer TTL %d s; TTL window (resolver + client cache + liveness) %.0f s; %d objects, %d wanted by the crowd, %d served to it, %d fetched from the origin\n\n",
		rep.TTL, rep.Window, rep.Objects, rep.Wanted, rep.Served, rep.Fetched)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tstart s\tlength s\trequests\tfailures\tlast failure after s\tbeyond TTL window\tviolations\torigin fetches\tmax/object (bound)\tpeer fetch failures\t")
	for _, ph := range append(slices.Clone(rep.Phases), rep.Total) {
		if ph.Skipped {
			fmt.Fprintf(tw, "%s\t%.0f\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", ph.Phase, ph.Start)
			continue
		}
		last := "-"
		if ph.Failures > 0 && ph.Phase != "total" {
			last = fmt.Sprintf("%.1f", ph.FailureWindow)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%d\t%d\t%s\t%d\t%d\t%d\t%d (%d)\t%.0f\t\n", ph.Phase, ph.Start, ph.End-ph.Start,
			ph.Requests, ph.Failures, last, ph.BeyondTTL, ph.Violations, ph.OriginFetches, ph.MaxPerObject, ph.Bound, ph.PeerFailed)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, ph := range rep.Phases {
		fmt.Fprintf(w, "  %-10s %s", ph.Phase, ph.Note)
		if len(ph.ByFailure) > 0 {
			fmt.Fprintf(w, "; failures by kind %v", ph.ByFailure)
		}
		fmt.Fprintln(w)
		for kind, sample := range ph.FailureSample {
			fmt.Fprintf(w, "             first %s failure: %s\n", kind, sample)
		}
	}
	for _, v := range rep.ViolationDetails {
		fmt.Fprintf(w, "VIOLATION at %.1f s, client %d via %s: %s (%s)\n", v.At, v.Client, v.Proxy, v.Violation, v.Detail)
	}
	for _, f := range rep.OverBound {
		fmt.Fprintf(w, "origin fetch over the bound: %.1f s, object %d, by %s\n", f.At, f.Object, f.From)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "FAIL:", p)
	}
	if len(rep.Problems) == 0 {
		fmt.Fprintln(w, "PASS: every response byte-identical to the origin's; origin fetches per object within each phase's bound")
	}
}

func (rep *report) writeJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
