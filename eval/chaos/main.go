//go:build linux

// Command chaos drives a flash crowd through a Coral network of separate
// hosts (internal/lab/netns/coralnet: every node, resolver, client and the
// origin in a network namespace of its own, addresses in 198.18.0.0/24)
// and, on a schedule, breaks it the way operations do:
//
//	go run ./eval/chaos [-nodes 6] [-objects 60] [-out docs/eval/chaos]
//	go run ./eval/chaos -old-bin DIR     # upgrade from these bin/coredns, bin/caddy
//	go run ./eval/chaos -upgrade=false   # start on the current binaries
//	go run ./eval/chaos -new-bin DIR     # upgrade to (and rotate with) these instead of bin/
//
// The phases, each observed until the clients have had a quiet stretch
// without a failure (-quiet, at least -min after the event):
//
//   - warmup: the crowd starts; it ends once the origin has served every
//     object once;
//   - upgrade: the network started on the previous release's binaries
//     (-old-commit, built once from a git worktree of that commit with its
//     builds/ scripts and cached under the user cache directory, or
//     -old-bin); one at a time, each node is drained as the operations
//     guide says (POST /coral/drain, the drain file; then until no client
//     has used it for an answer TTL; -drain=false skips that), stopped
//     (SIGTERM) and started on the new binaries with the same disk cache;
//   - kill: a third of the nodes lose both servers to SIGKILL;
//   - partition: nftables rules cut the east nodes off from the west ones
//     (clients, resolvers and the origin still reach both sides);
//   - heal: the rules go;
//   - restart: the killed nodes start again on their warm disk caches;
//   - rotate: the network key is rotated in three reloads of every node
//     (new key accepted, new key primary, old key removed), with a build
//     that has the DSHT keyring; skipped otherwise.
//
// The crowd: -workers per client host (4 hosts, 2 per region's Unbound),
// each fetching objects (-objects, 2 KiB to 600 KiB, half sent chunked)
// through a proxy picked at random from the DNS answer it holds
// for the answer's TTL. Its attention moves: the objects come in seven
// waves, one more with each phase, and half the requests are for the
// newest wave, so every phase has first fetches and peer fetches. Every
// response is checked: a 200 whose body is
// not byte-identical to the origin's (SHA-256), cut short but presented
// as complete, or another URL's body is a violation; any other error is a
// failure. The origin counts its fetches per object: in each phase at
// most one per object per side of a partition, plus one in the phases
// that stop or kill nodes (a download cut short by its proxy's end is
// started again by another proxy). Peer fetch failures come
// from the proxies' caddy_coral_peer_fetches_total.
//
// It prints a table per phase and writes chaos.json and chaos.png (a
// timeline) to -out. Exit status 1 when an invariant was broken or a
// phase did not recover. Needs root, bin/coredns, bin/caddy, Unbound,
// iproute2 and nftables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// defaultOldCommit is the previous release the upgrade starts from.
const defaultOldCommit = "556f003"

// params describe a run.
type params struct {
	Nodes     int           `json:"nodes"`
	Objects   int           `json:"objects"`
	Workers   int           `json:"workers_per_client_host"`
	Think     time.Duration `json:"think"`
	Min       time.Duration `json:"min_phase"`
	Quiet     time.Duration `json:"quiet"`
	Timeout   time.Duration `json:"phase_timeout"`
	Upgrade   bool          `json:"upgrade"`
	OldCommit string        `json:"old_commit,omitempty"`
	OldBin    string        `json:"old_bin,omitempty"`
	NewBin    string        `json:"new_bin,omitempty"`
	Drain     bool          `json:"drain_before_upgrade"`
	Rotate    bool          `json:"rotate"`
	// DebugProxy keeps each proxy's debug log in the run directory.
	DebugProxy bool                 `json:"-"`
	Out        string               `json:"-"`
	Name       string               `json:"-"` // file name stem in Out
	Command    string               `json:"-"` // the command line, for the report
	Logf       func(string, ...any) `json:"-"`
}

func main() {
	var p params
	flag.IntVar(&p.Nodes, "nodes", 6, "Coral nodes (CoreDNS + Caddy), half per region")
	flag.IntVar(&p.Objects, "objects", 210, "objects on the origin, wanted in 7 waves (one per phase)")
	flag.IntVar(&p.Workers, "workers", 6, "concurrent clients per client host (4 hosts)")
	flag.DurationVar(&p.Think, "think", 50*time.Millisecond, "mean pause between a client's requests")
	flag.DurationVar(&p.Min, "min", 20*time.Second, "shortest observation of a phase after its event")
	flag.DurationVar(&p.Quiet, "quiet", 10*time.Second, "failure-free stretch that ends a phase")
	flag.DurationVar(&p.Timeout, "phase-timeout", 3*time.Minute, "longest a phase may take to recover")
	flag.BoolVar(&p.Upgrade, "upgrade", true, "start on the previous release's binaries and upgrade node by node")
	flag.StringVar(&p.OldCommit, "old-commit", defaultOldCommit, "the previous release's commit (built once, cached)")
	flag.StringVar(&p.OldBin, "old-bin", "", "a directory with the previous release's coredns and caddy (instead of building -old-commit)")
	flag.StringVar(&p.NewBin, "new-bin", "", "a directory with the coredns and caddy to upgrade to (default: bin/ of the repository)")
	flag.BoolVar(&p.Drain, "drain", true, "drain each node (operations guide) before its upgrade")
	flag.BoolVar(&p.Rotate, "rotate", true, "rotate the network key (skipped without the keyring)")
	flag.StringVar(&p.Out, "out", "docs/eval/chaos", "directory for chaos.json and chaos.png")
	flag.BoolVar(&p.DebugProxy, "debug-proxy", false, "write each proxy's debug log (coral-debug.log in the kept run directory)")
	flag.Parse()
	p.Name = "chaos"
	p.Command = evalrun.CommandLine("chaos")
	p.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, p)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	if len(rep.Problems) > 0 {
		os.Exit(1)
	}
}

// run starts the network, the load and the schedule; the report covers
// what ran even when a phase failed.
func run(ctx context.Context, p params) (*report, error) {
	if err := coralnet.Available(); err != nil {
		return nil, err
	}
	newCoreDNS, err1 := labconf.Binary("coredns")
	newCaddy, err2 := labconf.Binary("caddy")
	if p.NewBin != "" {
		if !have(p.NewBin) {
			return nil, fmt.Errorf("-new-bin %s: no coredns and caddy there", p.NewBin)
		}
		newCoreDNS, newCaddy, err1, err2 = filepath.Join(p.NewBin, "coredns"), filepath.Join(p.NewBin, "caddy"), nil, nil
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	startCoreDNS, startCaddy := newCoreDNS, newCaddy
	upgradeNote := ""
	if p.Upgrade {
		dir := p.OldBin
		if dir == "" {
			var err error
			if dir, err = oldBinaries(ctx, p.OldCommit, p.Logf); err != nil {
				return nil, fmt.Errorf("the previous release's binaries: %w (or -old-bin DIR, or -upgrade=false)", err)
			}
		}
		startCoreDNS, startCaddy = filepath.Join(dir, "coredns"), filepath.Join(dir, "caddy")
		p.OldBin = dir
	} else {
		upgradeNote = "not asked for (-upgrade=false)"
	}
	dir, err := os.MkdirTemp("", "coral-chaos-")
	if err != nil {
		return nil, err
	}
	objs := makeObjects(p.Objects)
	start := time.Now()
	rec := &recorder{start: start}
	orig := newOrigin(objs, start)
	loadAvg := evalrun.LoadAvg()
	prov := evalrun.StartProvenance("chaos", evalrun.TopologyNetns)
	prov.Command = p.Command
	net, err := coralnet.Start(ctx, coralnet.Options{Dir: dir, Nodes: p.Nodes, Clients: 4,
		CoreDNS: startCoreDNS, Caddy: startCaddy, Origin: orig, Logf: p.Logf, DebugProxy: p.DebugProxy})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := net.Close(); cerr != nil {
			p.Logf("closing the lab: %v", cerr)
		}
	}()
	// The clock starts with the load.
	rec.start, orig.start = time.Now(), time.Now()
	lctx, stopLoad := context.WithCancel(ctx)
	l := &load{net: net, objects: objs, rec: rec, workers: p.Workers, think: p.Think, perWave: max(1, p.Objects/phaseCount)}
	l.nextWave()
	smp := &sampler{net: net, rec: rec}
	done := make(chan struct{}, 2)
	go func() { l.run(lctx); done <- struct{}{} }()
	go func() { smp.run(lctx); done <- struct{}{} }()
	s := &schedule{net: net, rec: rec, origin: orig, logf: p.Logf, minimum: p.Min, quiet: p.Quiet, timeout: p.Timeout,
		newCoreDNS: newCoreDNS, newCaddy: newCaddy, load: l, drain: p.Drain}
	err = s.all(ctx, p, upgradeNote)
	stopLoad()
	<-done
	<-done
	rep := buildReport(s, rec, smp, orig, p, rec.now())
	rep.Kernel, rep.Load, rep.Command = evalrun.Kernel(), loadAvg, p.Command
	prov.Finish()
	rep.Provenance = prov
	if werr := errors.Join(rep.writeJSON(filepath.Join(p.Out, p.Name+".json")), plotTimeline(filepath.Join(p.Out, p.Name+".png"), rep)); werr != nil {
		err = errors.Join(err, werr)
	}
	if err != nil {
		p.Logf("logs kept in %s", dir)
		return rep, err
	}
	if len(rep.Problems) > 0 {
		p.Logf("logs kept in %s", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return rep, nil
}

// phaseCount is how many phases all runs: the objects come in as many
// waves.
const phaseCount = 7

// all runs the phases in order.
func (s *schedule) all(ctx context.Context, p params, upgradeNote string) error {
	type step struct {
		name  string
		bound int // origin fetches per object (phase.Bound)
		skip  string
		event func(context.Context) (string, error)
		// waveAfter starts the phase's wave once the event is done, not
		// as it begins: the heal takes a moment (0.4 s for the nftables
		// rules), and a wave started before it ends is fetched once per
		// side, while the phase's bound counts one network.
		waveAfter bool
	}
	skipRotate := ""
	if !p.Rotate {
		skipRotate = "not asked for (-rotate=false)"
	} else if why := keyringMissing(s.newCaddy, s.net.Dir); why != "" {
		skipRotate = "keyring not in this build (" + why + ")"
	}
	for _, st := range []step{
		{"warmup", 1, "", s.warmup, false},
		{"upgrade", 2, upgradeNote, s.upgrade, false},
		{"kill", 2, "", s.kill, false},
		{"partition", 2, "", s.partition, false},
		{"heal", 1, "", s.heal, true},
		{"restart", 1, "", s.restart, false},
		{"rotate", 1, skipRotate, s.rotate, false},
	} {
		if err := s.run(ctx, st.name, st.bound, st.skip, st.waveAfter, st.event); err != nil {
			return err
		}
	}
	return nil
}
