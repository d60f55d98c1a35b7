//go:build linux

package main

import (
	"runtime"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/topology"
)

// provenance says where a result file came from, so that docs can quote
// it (and eval/report can tell a clean run from a reduced or dirty one).
type provenance struct {
	Experiment string `json:"experiment"` // "wan" or "wan-dht"
	Commit     string `json:"commit"`
	CleanTree  bool   `json:"clean_tree"`
	// Reduced is true for a run smaller than the full figure run (a
	// machine too busy for it): Note says how.
	Reduced     bool      `json:"reduced"`
	Note        string    `json:"note,omitempty"`
	CommandLine string    `json:"command_line"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_seconds"`
	LoadBefore  string    `json:"load_before"`
	LoadAfter   string    `json:"load_after"`
	// MachineBusyCores is the machine's mean busy CPUs over the run,
	// this run's processes included; CPUs how many it has.
	MachineBusyCores float64 `json:"machine_busy_cores"`
	CPUs             int     `json:"cpus"`
	Kernel           string  `json:"kernel"`
	Topology         string  `json:"topology"` // the matrix's source
	TopologyStats    string  `json:"topology_stats"`
	Seed             uint64  `json:"seed"`
}

func newProvenance(name string, m *topology.Matrix, seed uint64, reduced bool, note string) provenance {
	p := provenance{Experiment: name, Reduced: reduced, Note: note, CommandLine: evalrun.CommandLine("wan"),
		Started: time.Now().UTC(), LoadBefore: evalrun.LoadAvg(), CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(),
		Seed: seed}
	if m != nil {
		p.Topology, p.TopologyStats = m.Source, m.Stats().String()
	}
	// The same rule as every other experiment (evalrun): changes under
	// docs/eval are results, not code, so a regeneration that has already
	// written other files still runs from a clean tree.
	if root, err := evalrun.RepoRoot(); err == nil {
		if commit, dirty, err := evalrun.TreeState(root); err == nil {
			p.Commit, p.CleanTree = commit, len(dirty) == 0
		}
	}
	if dir := topology.DataDir(); dir != "" {
		p.TopologyStats += " (CORAL_RTT_DATA=" + dir + ")"
	}
	return p
}

// finish records the end of the run.
func (p *provenance) finish(busyStart float64) {
	p.WallSeconds = time.Since(p.Started).Seconds()
	p.LoadAfter = evalrun.LoadAvg()
	if p.WallSeconds > 0 {
		p.MachineBusyCores = (evalrun.MachineBusy() - busyStart) / p.WallSeconds
	}
}
