//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/eval/internal/vtime"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// The virtual-time side of the comparison runs the same node sites and
// RTTs (the world's node sites written as a WonderProxy-format data set,
// world.writeMatrix) in virtual time: this command's own -mode virtual
// for the clusters (the DSHT nodes of eval/internal/sim, as eval/clusters
// runs them, snapshotted as often as the real run), and eval/endtoend,
// unchanged, for the end-to-end latency, with CORAL_RTT_DATA naming the
// data set.

// virtualClusters is what -mode virtual writes.
type virtualClusters struct {
	NodeSites []int        `json:"node_sites"` // the data set's site index = the lab's
	At        []float64    `json:"at_seconds"`
	Labels    [][][]string `json:"labels"` // [snapshot][level-1][node]
	FormedS   []float64    `json:"formed_seconds"`
}

// runVirtual is -mode virtual: n nodes, perSite per site, on the data set
// in dir, snapshotted every step for d of virtual time.
func runVirtual(dir string, perSite int, d, step time.Duration, seed uint64, out string) {
	vtime.Main(func() error {
		m, err := topology.LoadWonderProxy(dir)
		if err != nil {
			return err
		}
		s, err := sim.Start(sim.Options{N: m.Len() * perSite, PerSite: perSite, Seed: seed, Matrix: m,
			Tweak: func(i int, c *coraldht.Config) { c.HintPrivate = true }})
		if err != nil {
			return err
		}
		defer s.Close()
		v := virtualClusters{}
		for _, p := range s.Placed {
			v.NodeSites = append(v.NodeSites, m.Sites[p.Site].ID)
		}
		start := time.Now()
		for {
			labels := [][]string{make([]string, len(s.Nodes)), make([]string, len(s.Nodes))}
			for i, n := range s.Nodes {
				for _, lv := range n.Levels() {
					if lv.Level >= 1 && lv.Level <= 2 {
						labels[lv.Level-1][i] = lv.Cluster.ID.String()
					}
				}
			}
			v.At = append(v.At, time.Since(start).Seconds())
			v.Labels = append(v.Labels, labels)
			if time.Since(start) >= d {
				v.FormedS = []float64{-1, -1}
				for _, n := range s.Nodes {
					for _, lv := range n.Levels() {
						if lv.Level >= 1 && lv.Level <= 2 && !lv.LastChange.IsZero() {
							v.FormedS[lv.Level-1] = max(v.FormedS[lv.Level-1], lv.LastChange.Sub(start).Seconds())
						}
					}
				}
				break
			}
			time.Sleep(step)
		}
		return sim.WriteJSON(out, v)
	})
}

// virtualClusterRun runs -mode virtual on w's node sites and judges its
// snapshots as the real run's.
func virtualClusterRun(w *world, dir string, perSite int, d, step time.Duration, seed uint64) (*clusterRun, error) {
	data := filepath.Join(dir, "matrix")
	if err := w.writeMatrix(data, w.NodeSites); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "virtual-clusters.json")
	cmd := goRun("./eval/wan", "-mode", "virtual", "-matrix", data, "-persite", fmt.Sprint(perSite),
		"-watch", d.String(), "-step", step.String(), "-seed", fmt.Sprint(seed), "-virtual-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("virtual clusters: %v: %s", err, b)
	}
	var v virtualClusters
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	r := &clusterRun{NodeSites: v.NodeSites}
	for i := range v.NodeSites {
		r.Nodes = append(r.Nodes, fmt.Sprintf("v%d", i))
	}
	for i, at := range v.At {
		r.judge(w, time.Duration(at*float64(time.Second)), v.Labels[i])
	}
	r.settle()
	r.FormedS = v.FormedS
	return r, nil
}

// goRun is `go run PKG ARGS...` from the repository's root.
func goRun(pkg string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", append([]string{"run", pkg}, args...)...)
	if wd, err := os.Getwd(); err == nil {
		if root, err := labconf.RepoRoot(wd); err == nil {
			cmd.Dir = root
		}
	}
	return cmd
}
