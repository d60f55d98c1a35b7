//go:build linux

package wan

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/coralcdn/coral/internal/lab/wan/nfq"
)

// The delayer is a child process of the lab: the lab's own program run
// again with delayerEnv naming its configuration. In each router's
// namespace it binds NFQUEUE 0, to which the router's iptables rules send
// every packet leaving on a wide-area link ("w…"), routed and with its TTL
// already decremented by the kernel, and accepts each once the link's
// one-way delay has passed (plus, at the router where a site pair's path
// turns, the pair's correction; see plan). It runs at a high priority
// (nice -15) so that the servers under test, which share the machine's
// cores, delay it as little as possible, and reports how late its
// verdicts were.
const delayerEnv = "CORAL_WAN_DELAYER"

// copyRange is how much of each packet the delayer reads: the IPv4 header.
const copyRange = 20

// delayerConfig is what the lab tells the delayer.
type delayerConfig struct {
	Routers []routerConfig `json:"routers"`
	// Stats is the file the delayer rewrites with its counters.
	Stats string `json:"stats"`
	Seed  uint64 `json:"seed"`
}

// routerConfig is one router's delays.
type routerConfig struct {
	Name string `json:"name"`
	NS   string `json:"ns"` // /run/netns/…
	// LinkDelay is the one-way delay of each wide-area link, by the name
	// of the router's interface on it.
	LinkDelay map[string]time.Duration `json:"link_delay"`
	// Turn holds the correction for the site pairs whose path turns at
	// this router (pairKey), in nanoseconds.
	Turn map[uint32]time.Duration `json:"turn,omitempty"`
	// Loss is the probability that the router drops a packet leaving on
	// a wide-area link.
	Loss float64 `json:"loss,omitempty"`
}

// pairKey names an ordered site pair.
func pairKey(a, b int) uint32 { return uint32(a)<<16 | uint32(b) }

// siteOf maps an address to its site: 198.18.s.0/24 (a site's LAN) and
// 198.19.s.0/24 for s < maxSites (its client LAN); -1 for the routers'
// and links' addresses.
func siteOf(src [4]byte) int {
	if src[0] != 198 || (src[1] != 18 && src[1] != 19) {
		return -1
	}
	if int(src[2]) >= maxSites {
		return -1
	}
	return int(src[2])
}

// delayStats are the delayer's counters for one router.
type delayStats struct {
	Packets uint64 `json:"packets"`
	Lost    uint64 `json:"lost"` // dropped on purpose (Loss)
	// Late counts verdicts by how late they were given, against the
	// bounds of LateBoundsUs: [0] within the first bound, …, the last
	// beyond every bound.
	Late  []uint64 `json:"late"`
	MaxUs int64    `json:"max_late_us"`
	Err   string   `json:"error,omitempty"`
}

// LateBoundsUs are the bounds of delayStats.Late, in microseconds.
var LateBoundsUs = []int64{100, 500, 1000, 2000, 5000, 10000}

// DelayStats is what the delayer reports, by router name.
type DelayStats map[string]*delayStats

func init() {
	if path := os.Getenv(delayerEnv); path != "" {
		if err := runDelayer(path); err != nil {
			fmt.Fprintln(os.Stderr, "wan delayer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// held is a packet waiting for its verdict: due on CLOCK_MONOTONIC, in
// nanoseconds.
type held struct {
	due int64
	id  uint32
}

type heldHeap []held

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// routerDelay is the delayer's state for one router.
type routerDelay struct {
	cfg   routerConfig
	q     *nfq.Queue
	delay map[uint32]time.Duration // by interface index
	rng   *rand.Rand

	mu    sync.Mutex
	held  heldHeap
	armed int64 // when the timer fires next (0: disarmed)
	// timer is a timerfd: Go's own timers wake up to a millisecond late
	// (the runtime's poller waits in whole milliseconds), which on a
	// path of eight delays would add several milliseconds to an RTT.
	timer int

	packets, lost atomic.Uint64
	late          []atomic.Uint64
	maxLate       atomic.Int64
}

func runDelayer(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg delayerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	var rs []*routerDelay
	for i, rc := range cfg.Routers {
		r, err := openRouter(rc, cfg.Seed+uint64(i))
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	errc := make(chan error, 2*len(rs))
	for _, r := range rs {
		go func() { errc <- r.read() }()
		go r.release()
	}
	fmt.Println("wan delayer: ready,", len(rs), "routers")
	writeStats := func() {
		st := DelayStats{}
		for _, r := range rs {
			s := &delayStats{Packets: r.packets.Load(), Lost: r.lost.Load(), MaxUs: r.maxLate.Load()}
			for i := range r.late {
				s.Late = append(s.Late, r.late[i].Load())
			}
			st[r.cfg.Name] = s
		}
		b, _ := json.Marshal(st)
		tmp := cfg.Stats + ".tmp"
		if os.WriteFile(tmp, b, 0o644) == nil {
			_ = os.Rename(tmp, cfg.Stats)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	tick := time.NewTicker(2 * time.Second)
	for {
		select {
		case err := <-errc:
			writeStats()
			return err
		case s := <-sig:
			writeStats()
			if s != syscall.SIGUSR1 {
				return nil
			}
		case <-tick.C:
			writeStats()
		}
	}
}

// openRouter binds the queue inside the router's namespace and maps its
// interfaces' indexes to their links' delays.
func openRouter(rc routerConfig, seed uint64) (*routerDelay, error) {
	r := &routerDelay{cfg: rc, delay: map[uint32]time.Duration{}, rng: rand.New(rand.NewPCG(seed, 0x6c6f7373)),
		late: make([]atomic.Uint64, len(LateBoundsUs)+1)}
	var err error
	if r.timer, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	err = inNamespace(rc.NS, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifc := range ifs {
			if d, ok := rc.LinkDelay[ifc.Name]; ok {
				r.delay[uint32(ifc.Index)] = d
			}
		}
		if len(r.delay) != len(rc.LinkDelay) {
			return fmt.Errorf("%d of %d links found among %v", len(r.delay), len(rc.LinkDelay), ifs)
		}
		r.q, err = nfq.Open(0, copyRange)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("router %s: %w", rc.Name, err)
	}
	return r, nil
}

// inNamespace runs f on a locked OS thread inside the namespace at path.
// The thread never goes back: the delayer has nothing else to run there,
// and a thread that ends with its goroutine locked is thrown away.
func inNamespace(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// read takes packets off the queue and schedules their verdicts.
func (r *routerDelay) read() error {
	for {
		ps, err := r.q.Read()
		if err != nil {
			return fmt.Errorf("router %s: %w", r.cfg.Name, err)
		}
		now := monotonic()
		var drop []uint32
		r.mu.Lock()
		for _, p := range ps {
			r.packets.Add(1)
			if r.cfg.Loss > 0 && r.rng.Float64() < r.cfg.Loss {
				drop = append(drop, p.ID)
				continue
			}
			d := r.delay[p.OutDev]
			if len(r.cfg.Turn) > 0 && len(p.Payload) >= 20 {
				a, b := siteOf([4]byte(p.Payload[12:16])), siteOf([4]byte(p.Payload[16:20]))
				if a >= 0 && b >= 0 {
					d += r.cfg.Turn[pairKey(a, b)]
				}
			}
			heap.Push(&r.held, held{due: now + int64(d), id: p.ID})
		}
		if len(r.held) > 0 && (r.armed == 0 || r.held[0].due < r.armed) {
			r.arm(r.held[0].due)
		}
		r.mu.Unlock()
		if len(drop) > 0 {
			r.lost.Add(uint64(len(drop)))
			if err := r.q.Verdicts(drop, nfq.Drop); err != nil {
				return err
			}
		}
	}
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, the timerfd's clock.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// arm sets the timer to fire at due (r.mu held).
func (r *routerDelay) arm(due int64) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(due)}
	_ = unix.TimerfdSettime(r.timer, unix.TFD_TIMER_ABSTIME, &spec, nil)
	r.armed = due
}

// release accepts each held packet when it is due: it blocks on the
// timer, which read arms for the earliest packet held.
func (r *routerDelay) release() {
	var ids []uint32
	buf := make([]byte, 8)
	for {
		if _, err := unix.Read(r.timer, buf); err != nil && err != unix.EINTR && err != unix.EAGAIN {
			return
		}
		r.mu.Lock()
		now := monotonic()
		ids = ids[:0]
		for len(r.held) > 0 && r.held[0].due <= now {
			h := heap.Pop(&r.held).(held)
			ids = append(ids, h.id)
			r.record(time.Duration(now - h.due))
		}
		r.armed = 0
		if len(r.held) > 0 {
			r.arm(r.held[0].due)
		}
		r.mu.Unlock()
		if len(ids) > 0 {
			_ = r.q.Verdicts(ids, nfq.Accept)
		}
	}
}

func (r *routerDelay) record(late time.Duration) {
	us := late.Microseconds()
	i := 0
	for i < len(LateBoundsUs) && us > LateBoundsUs[i] {
		i++
	}
	r.late[i].Add(1)
	for {
		m := r.maxLate.Load()
		if us <= m || r.maxLate.CompareAndSwap(m, us) {
			break
		}
	}
}
