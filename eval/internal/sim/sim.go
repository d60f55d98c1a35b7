// Package sim builds simulated Coral networks for the experiments in eval/:
// hundreds to thousands of real coraldht nodes on an in-memory network whose
// latencies come from a wide-area RTT matrix. Call Start inside a virtual-
// time bubble (vtime.Main).
package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/topology"
)

// Options describes a simulated network.
type Options struct {
	N       int              // nodes
	PerSite int              // nodes per site (the paper ran 3 per PlanetLab host)
	Seed    uint64           // placement, join order and node randomness
	Matrix  *topology.Matrix // site RTTs
	// Tweak adjusts node i's configuration (Key and Seed are preset).
	Tweak func(i int, c *coraldht.Config)
	// JoinParallel is how many nodes join at once. Default 32.
	JoinParallel int
	// Late marks nodes that Start creates but does not bootstrap; the
	// experiment joins them later with Sim.Join.
	Late func(i int) bool
	// Wrap, if set, gives node i the transport it returns in place of
	// its endpoint: experiments model misbehaving nodes this way.
	Wrap func(i int, tr *memnet.Transport) coraldht.Transport
}

// NetworkSecret is the network key's secret of every simulated network:
// experiments that forge datagrams, as a member holding the key would,
// tag them with it (coraldht/PROTOCOL.md).
const NetworkSecret = "simulation network key, 32 bytes or more"

// Sim is a running simulated network.
type Sim struct {
	Key    *coraldht.Key // the network key, of NetworkSecret
	Net    *memnet.Network
	Nodes  []*coraldht.Node
	Placed []topology.Node
	Matrix *topology.Matrix
}

// Start creates the nodes and joins each through a random node that has
// already joined.
func Start(o Options) (*Sim, error) {
	if o.N < 2 {
		return nil, fmt.Errorf("sim: %d nodes", o.N)
	}
	if o.PerSite < 1 {
		o.PerSite = 1
	}
	if o.JoinParallel < 1 {
		o.JoinParallel = 32
	}
	placed := o.Matrix.Place(o.N, o.PerSite, o.Seed)
	s := &Sim{
		Net:    memnet.New(memnet.Config{Latency: topology.Latency(o.Matrix, placed), Seed: o.Seed + 1}),
		Placed: placed,
		Matrix: o.Matrix,
	}
	var err error
	s.Key, err = coraldht.NewKey([]byte(NetworkSecret))
	if err != nil {
		return nil, err
	}
	for i, p := range placed {
		tr, err := s.Net.Listen(p.Addr)
		if err != nil {
			s.Close()
			return nil, err
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = s.Key
		cfg.Seed = o.Seed*1_000_003 + uint64(i) + 1
		if o.Tweak != nil {
			o.Tweak(i, &cfg)
		}
		var t coraldht.Transport = tr
		if o.Wrap != nil {
			t = o.Wrap(i, tr)
		}
		n, err := coraldht.NewNode(cfg, t)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Nodes = append(s.Nodes, n)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 77))
	order := rng.Perm(o.N)
	if o.Late != nil {
		order = slices.DeleteFunc(order, o.Late)
	}
	if len(order) == 0 {
		s.Close()
		return nil, fmt.Errorf("sim: every node is late")
	}
	joined := []int{order[0]}
	ctx := context.Background()
	for start := 1; start < len(order); start += o.JoinParallel {
		end := min(start+o.JoinParallel, len(order))
		var wg sync.WaitGroup
		errs := make([]error, end-start)
		for j := start; j < end; j++ {
			via := s.Nodes[joined[rng.IntN(len(joined))]].Addr()
			n := s.Nodes[order[j]]
			wg.Go(func() { errs[j-start] = n.Bootstrap(ctx, via) })
		}
		wg.Wait()
		for j, err := range errs {
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("sim: join node %d: %w", order[start+j], err)
			}
		}
		joined = append(joined, order[start:end]...)
	}
	return s, nil
}

// Join bootstraps node i through node via.
func (s *Sim) Join(i, via int) error {
	return s.Nodes[i].Bootstrap(context.Background(), s.Nodes[via].Addr())
}

// Close stops every node.
func (s *Sim) Close() {
	for _, n := range s.Nodes {
		n.Close()
	}
}

// WriteJSON writes v, indented, to path, creating its directory.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// PeakRSS returns the process's peak resident set size in bytes (Linux), or
// the Go runtime's total memory obtained from the OS elsewhere.
func PeakRSS() uint64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				f := strings.Fields(rest)
				if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return kb * 1024
				}
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Sys
}

// Percentile returns the p-th percentile (0–100) of sorted values.
func Percentile[T ~int64 | ~float64 | ~int](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted)-1) + 0.5)
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WallNow reads the real clock. Inside a virtual-time bubble time.Now is
// virtual, so experiments that report their own cost use this instead.
func WallNow() time.Time { return evalrun.WallNow() }
