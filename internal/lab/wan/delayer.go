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
// turns, the pair's correction; see plan). It runs at real-time priority
// (the lab starts it under chrt) so that the servers under test, which
// share the machine's cores, delay it as little as possible, and reports
// how late its verdicts were.
//
// Its own costs are taken out of the delays, not added to them: every
// router on a path holds each packet, so what each adds (0.1–0.4 ms, the
// wake-up on the queue, the timer's and the verdict's) made a path
// through the core 1–4 ms longer than the matrix on a loaded machine. A
// packet's delay counts from its kernel arrival stamp, not from when the
// delayer read it, and a release starts early by a running estimate of
// the median cost of a release (early).
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
	// Late counts packets by how late their verdicts were done (the
	// verdict's system call, which forwards them, returned), against the
	// bounds of LateBoundsUs: [0] within the first bound (or early), …,
	// the last beyond every bound.
	Late  []uint64 `json:"late"`
	MaxUs int64    `json:"max_late_us"`
	// Wait counts packets by how long they waited in the kernel's queue
	// before the delayer read them (their kernel timestamp to the read),
	// against the same bounds; Unstamped those without a usable stamp.
	Wait      []uint64 `json:"wait"`
	MaxWaitUs int64    `json:"max_wait_us"`
	Unstamped uint64   `json:"unstamped"`
	Err       string   `json:"error,omitempty"`
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
	// early is how much before a packet's due time the release starts
	// (nanoseconds): a running estimate of the median cost of a release,
	// from the timer's expiry to the verdict's return (waking up, and the
	// kernel forwarding the packets it accepts), so that packets leave
	// at their due time rather than that much after it.
	early int64
	// timer is a timerfd: Go's own timers wake up to a millisecond late
	// (the runtime's poller waits in whole milliseconds), which on a
	// path of eight delays would add several milliseconds to an RTT.
	timer int

	packets, lost atomic.Uint64
	late          []atomic.Uint64
	maxLate       atomic.Int64
	wait          []atomic.Uint64
	maxWait       atomic.Int64
	unstamped     atomic.Uint64
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
	// The kernel stamps received packets, and so the packets queued to
	// the delayer with their arrival, only while some socket asks for
	// timestamps (a global switch): this one does, for the delayer's life.
	stamps, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("timestamp socket: %w", err)
	}
	defer unix.Close(stamps)
	if err := unix.SetsockoptInt(stamps, unix.SOL_SOCKET, unix.SO_TIMESTAMP, 1); err != nil {
		return fmt.Errorf("SO_TIMESTAMP: %w", err)
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
			s := &delayStats{Packets: r.packets.Load(), Lost: r.lost.Load(), MaxUs: r.maxLate.Load(),
				MaxWaitUs: r.maxWait.Load(), Unstamped: r.unstamped.Load()}
			for i := range r.late {
				s.Late = append(s.Late, r.late[i].Load())
				s.Wait = append(s.Wait, r.wait[i].Load())
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
		late: make([]atomic.Uint64, len(LateBoundsUs)+1), wait: make([]atomic.Uint64, len(LateBoundsUs)+1)}
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
		now, wall := monotonic(), time.Now().UnixNano()
		var drop []uint32
		r.mu.Lock()
		for _, p := range ps {
			r.packets.Add(1)
			if r.cfg.Loss > 0 && r.rng.Float64() < r.cfg.Loss {
				drop = append(drop, p.ID)
				continue
			}
			// The delay counts from the packet's arrival in the router
			// (its kernel timestamp), not from this read: the time it
			// waited in the queue for the delayer to wake is part of the
			// link's delay, not added to it. A packet without a
			// receive stamp on the wall clock (TCP's carry a departure
			// time on another clock) counts from now.
			arrived := now
			if w := wall - p.Stamp; p.Stamp > 0 && w >= 0 && w < int64(time.Second) {
				bucket(r.wait, &r.maxWait, time.Duration(w))
				arrived -= w
			} else {
				r.unstamped.Add(1)
			}
			d := r.delay[p.OutDev]
			if len(r.cfg.Turn) > 0 && len(p.Payload) >= 20 {
				a, b := siteOf([4]byte(p.Payload[12:16])), siteOf([4]byte(p.Payload[16:20]))
				if a >= 0 && b >= 0 {
					d += r.cfg.Turn[pairKey(a, b)]
				}
			}
			heap.Push(&r.held, held{due: arrived + int64(d), id: p.ID})
		}
		if len(r.held) > 0 && (r.armed == 0 || r.held[0].due-r.early < r.armed) {
			r.arm(r.held[0].due - r.early)
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
	due = max(due, 1) // 0 would disarm it
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(due)}
	_ = unix.TimerfdSettime(r.timer, unix.TFD_TIMER_ABSTIME, &spec, nil)
	r.armed = due
}

// release accepts each held packet when it is due: it blocks on the
// timer, which read arms for the earliest packet held.
func (r *routerDelay) release() {
	var ids []uint32
	var dues []int64
	buf := make([]byte, 8)
	for {
		if _, err := unix.Read(r.timer, buf); err != nil && err != unix.EINTR && err != unix.EAGAIN {
			return
		}
		r.mu.Lock()
		now, fired := monotonic(), r.armed
		ids, dues = ids[:0], dues[:0]
		for len(r.held) > 0 && r.held[0].due-r.early <= now {
			h := heap.Pop(&r.held).(held)
			ids = append(ids, h.id)
			dues = append(dues, h.due)
		}
		r.armed = 0
		if len(r.held) > 0 {
			r.arm(r.held[0].due - r.early)
		}
		r.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		_ = r.q.Verdicts(ids, nfq.Accept)
		done := monotonic()
		for _, due := range dues {
			r.record(time.Duration(done - due))
		}
		if fired > 0 {
			r.mu.Lock()
			r.early = nextEarly(r.early, done-fired)
			r.mu.Unlock()
		}
	}
}

// maxEarly bounds how early a release may start: past it, a machine too
// loaded to keep time shows as lateness (DelayStats), not as packets
// released ahead of time once the load is gone.
const maxEarly = int64(time.Millisecond)

// earlyStep is how far one release moves the estimate of a release's cost.
const earlyStep = int64(5 * time.Microsecond)

// nextEarly moves the estimate of a release's cost a step toward the cost
// just seen: it tracks the median, which a few releases held up for
// milliseconds by a load spike do not move. (A mean did: after one such
// spike every router released up to a millisecond early, and a path of
// ten delays was 2.8 ms short.)
func nextEarly(early, cost int64) int64 {
	if cost > early {
		early += earlyStep
	} else {
		early -= earlyStep
	}
	return min(max(early, 0), maxEarly)
}

func (r *routerDelay) record(late time.Duration) { bucket(r.late, &r.maxLate, late) }

// bucket counts d in the histogram h (bounds LateBoundsUs) and raises max.
func bucket(h []atomic.Uint64, max *atomic.Int64, d time.Duration) {
	us := d.Microseconds()
	i := 0
	for i < len(LateBoundsUs) && us > LateBoundsUs[i] {
		i++
	}
	h[i].Add(1)
	for {
		m := max.Load()
		if us <= m || max.CompareAndSwap(m, us) {
			break
		}
	}
}
