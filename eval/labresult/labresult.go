// Package labresult writes the result files of docs/eval that lab tests
// make (test/resolverlab's resolver-proofs.json, test/nodelab's
// restart.json), with the provenance every experiment records
// (eval/internal/evalrun, which Go's internal rule keeps out of test/'s
// reach). eval/report's registry runs those tests as the run records
// them: evalrun.TestCommandLine.
package labresult

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// Topologies of the lab tests' runs (evalrun's).
const (
	Loopback = evalrun.TopologyLoopback // 127.0.0.0/8
	Netns    = evalrun.TopologyNetns    // network namespaces on one bridge
)

// A Run is one run of a lab test that may write a result file.
type Run struct {
	envVar, name string
	prov         *evalrun.Provenance
}

// Start records the start of test (its name) of the package pkg
// ("test/nodelab") on topology (Loopback, Netns),
// whose result file the environment variable envVar names (relative
// names are from the repository's root). Call it when the test starts.
func Start(pkg, test, topology, envVar string) *Run {
	r := &Run{envVar: envVar, name: os.Getenv(envVar)}
	if r.name != "" {
		r.prov = evalrun.StartTestProvenance(pkg, test, topology, envVar+"="+r.name)
	}
	return r
}

// Wanted reports whether the run was asked for a result file.
func (r *Run) Wanted() bool { return r.name != "" }

// Write writes the result file, if one was asked for: fields, and the
// run's provenance under "provenance", finished now.
func (r *Run) Write(fields map[string]any) error {
	if !r.Wanted() {
		return nil
	}
	if _, ok := fields["provenance"]; ok {
		return fmt.Errorf("%s: the field provenance is the run's own", r.envVar)
	}
	out := r.name
	if !filepath.IsAbs(out) {
		root, err := evalrun.RepoRoot()
		if err != nil {
			return err
		}
		out = filepath.Join(root, out)
	}
	r.prov.Finish()
	all := map[string]any{"provenance": r.prov}
	for k, v := range fields {
		all[k] = v
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
