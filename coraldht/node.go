package coraldht

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Node is one Coral node: a member of one cluster per level, with a routing
// table and storage for each. Create it with NewNode; it serves RPCs until
// Close. All methods are safe for concurrent use.
type Node struct {
	cfg    Config
	tr     Transport
	keys   *Keyring // keyring.go
	self   Contact  // as it goes on the wire: services and capabilities
	public Contact  // as the node's API shows it: services alone
	log    *slog.Logger

	levels []*level
	store  *store
	load   *loadTracker
	// published is the load this node's proxy publishes (proxyload.go).
	published publishedLoad
	peers     *peerTable
	replay    *replayFilter
	apps      *appTable // application message handlers (app.go)

	identity  *identityState // node identity mode (identity.go); nil without
	cookies   *cookieJar     // address cookies this node grants (cookies.go)
	pads      *padBudget     // padded first contacts per destination prefix
	verifying *verifier      // pings proving claimed addresses (verify.go)
	abuse     *abuseLog      // suspects (abuse.go)

	mu      sync.Mutex
	rng     *mrand.Rand
	pending map[uint64]*pendingCall

	lastStamp atomic.Int64
	counters  *nodeCounters

	// testHookAfterForward, when set by a test, runs between the forward
	// and reverse phases of a put.
	testHookAfterForward func([]levelStack)

	tracer atomic.Pointer[requestTracer] // TraceRequests (trace.go)

	joined     chan struct{} // closed when Bootstrap first succeeds
	joinOnce   sync.Once
	bootstraps []netip.AddrPort // guarded by mu; traceroute aims at them

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// level is the node's membership at one level of the hierarchy.
type level struct {
	index     int
	threshold time.Duration // 0 at level 0: unbounded

	pinned bool // fixed by Config.Pins: never re-clustered

	mu         sync.Mutex
	cluster    ClusterInfo // LogSize refreshed by updateSizes
	changes    int         // cluster changes so far
	lastChange time.Time
	left       map[ID]leftCluster // clusters left recently
	lastSplit  time.Time          // when the node last split away

	rt *routingTable
}

func (lv *level) info() ClusterInfo {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.cluster
}

// NewNode starts a node on tr. The node owns tr and closes it in Close.
func NewNode(cfg Config, tr Transport) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	local := tr.LocalAddr()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	adv := cfg.Advertise
	if !adv.IsValid() {
		adv = local
	}
	adv = netip.AddrPortFrom(adv.Addr().Unmap(), adv.Port())
	if err := wire.CheckAddr(adv); err != nil {
		return nil, fmt.Errorf("coraldht: advertised address: %v (set Config.Advertise)", err)
	}
	key := cfg.Key
	if key == nil {
		if !local.Addr().IsLoopback() || !adv.Addr().IsLoopback() {
			return nil, fmt.Errorf("%w: refusing to listen on %v without one, since anyone could then join, read and corrupt this network; %s", ErrNoKey, local, KeyHelp)
		}
		key = insecureLoopbackKey
	}
	keys, err := newKeyring(key, cfg.AcceptedKeys)
	if err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	n := &Node{
		cfg:      cfg,
		tr:       tr,
		keys:     keys,
		self:     Contact{ID: NodeIDFor(adv), Addr: adv, Services: cfg.Services | wire.CapExtensions},
		public:   Contact{ID: NodeIDFor(adv), Addr: adv, Services: cfg.Services},
		store:    newStore(cfg),
		load:     newLoadTracker(cfg.Leak, cfg.MaxTrackedKeys),
		peers:    newPeerTable(8192, cfg.MinRPCTimeout, cfg.MaxRPCTimeout, cfg.InitialRPCTimeout),
		replay:   newReplayFilter(int64(cfg.MaxClockSkew), int64(cfg.ReorderWindow), now.UnixNano()),
		apps:     newAppTable(),
		rng:      mrand.New(mrand.NewPCG(seed, seed>>1^0x5851f42d4c957f2d)),
		pending:  make(map[uint64]*pendingCall),
		counters: newNodeCounters(),

		identity:  newIdentityState(cfg.Identity),
		cookies:   newCookieJar(),
		pads:      newPadBudget(),
		verifying: newVerifier(),
		abuse:     newAbuseLog(),
	}
	n.log = log.With("node", n.self.String())
	n.addLevels(seed, now)
	n.joined = make(chan struct{})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(3)
	go n.receiveLoop()
	go n.maintenanceLoop()
	go n.clusterLoop()
	return n, nil
}

// addLevels makes the node's levels: level 0 and one per threshold, each
// with its routing table and, until clustering places the node, a
// singleton cluster (or the pinned one).
func (n *Node) addLevels(seed uint64, now time.Time) {
	cfg := n.cfg
	limits := n.tableLimits(seed)
	for i := 0; i <= len(cfg.Levels); i++ {
		lv := &level{index: i, rt: newRoutingTable(n.self.ID, cfg.BucketSize, cfg.MaxFailures, cfg.QuestionableAfter, limits, now)}
		lv.cluster = ClusterInfo{Level: i, Created: now.Truncate(time.Second)}
		if i > 0 {
			lv.threshold = cfg.Levels[i-1]
			if name, ok := cfg.Pins[i]; ok {
				lv.pinned = true
				lv.cluster.ID, lv.cluster.Created = ClusterIDFor(name), pinnedCreated
			} else {
				// Until clustering places it, a node is a singleton at
				// every level above 0, under a random cluster ID.
				lv.cluster.ID = n.randomID()
			}
		}
		n.levels = append(n.levels, lv)
	}
}

// tableLimits are the routing tables' caps and rank secret: drawn from
// the node's seed when one is configured (experiments reproduce), from
// crypto/rand otherwise; none under TrustMembers.
func (n *Node) tableLimits(seed uint64) tableLimits {
	if n.cfg.TrustMembers {
		return tableLimits{}
	}
	var key [32]byte
	if n.cfg.Seed != 0 {
		key = sha256.Sum256(binary.LittleEndian.AppendUint64([]byte("coral rank secret"), seed))
	} else if _, err := rand.Read(key[:]); err != nil {
		panic("coraldht: crypto/rand: " + err.Error())
	}
	return tableLimits{perIP: n.cfg.ContactsPerIP, perNet: n.cfg.ContactsPerSubnet, own: SitePrefix(n.self.Addr.Addr()), rankKey: &key}
}

// ID returns the node's ID.
func (n *Node) ID() ID { return n.self.ID }

// Addr returns the address the node advertises.
func (n *Node) Addr() netip.AddrPort { return n.self.Addr }

// Contact returns the node's own contact.
func (n *Node) Contact() Contact { return n.public }

// publicContact is c as the node's API shows contacts: its services,
// without the capabilities the services word also carries on the wire.
func publicContact(c Contact) Contact {
	c.Services &^= wire.CapExtensions
	return c
}

// Close stops the node: operations in progress return ErrClosed, the
// transport is closed and every goroutine has exited when Close returns.
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	n.cancel()
	err := n.tr.Close()
	n.mu.Lock()
	for id, pc := range n.pending {
		pc.stopTimers()
		delete(n.pending, id)
	}
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

func (n *Node) randomID() ID {
	n.mu.Lock()
	defer n.mu.Unlock()
	var id ID
	for i := 0; i < IDLen; i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], n.rng.Uint64())
		copy(id[i:], b[:])
	}
	return id
}

// stamp returns a timestamp for an outgoing datagram: the current time in
// nanoseconds, bumped if needed so no two datagrams from this node share one
// (the replay filter relies on it).
func (n *Node) stamp() int64 {
	now := time.Now().UnixNano()
	for {
		last := n.lastStamp.Load()
		ts := max(now, last+1)
		if n.lastStamp.CompareAndSwap(last, ts) {
			return ts
		}
	}
}

func (n *Node) clusterInfos() []ClusterInfo {
	out := make([]ClusterInfo, len(n.levels))
	for i, lv := range n.levels {
		out[i] = lv.info()
	}
	return out
}

// updateSizes refreshes the size estimate each level advertises. It runs
// from maintenance rather than per datagram, since it scans the tables.
func (n *Node) updateSizes() {
	for _, lv := range n.levels {
		est := logSizeEstimate(lv.rt, n.self.ID, n.cfg.BucketSize)
		lv.mu.Lock()
		lv.cluster.LogSize = est
		lv.mu.Unlock()
	}
}

func (n *Node) maintenanceLoop() {
	defer n.wg.Done()
	interval := min(n.cfg.RefreshInterval/4, 30*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		n.store.expire(now)
		n.load.prune(now.Add(-2 * time.Minute))
		n.replay.prune(now.UnixNano())
		n.peers.prune(now.Add(-time.Hour))
		n.refreshBuckets(now)
		n.updateSizes()
	}
}

// refreshBuckets looks up a random ID in every bucket range no lookup has
// touched for RefreshInterval, so tables keep live contacts everywhere.
func (n *Node) refreshBuckets(now time.Time) {
	for _, lv := range n.levels {
		for _, i := range lv.rt.staleBuckets(now, n.cfg.RefreshInterval) {
			if n.ctx.Err() != nil {
				return
			}
			n.mu.Lock()
			target := randomIDWithPrefix(n.self.ID, i, n.rng)
			n.mu.Unlock()
			lv.rt.touch(target, now)
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LookupTimeout)
			n.findNode(ctx, lv.index, target)
			cancel()
		}
	}
}
