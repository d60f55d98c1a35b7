package abuse

import (
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---------------------------------------------------------------------
// Fair shares of the bandwidth budget.
//
// With one counter for the whole node, one hot origin can spend the
// budget and push every other origin's clients into coral-no-serve
// redirects. So a budget made with shares (NewFairBudget) also counts the
// bytes of each origin account in the window, and shares the budget among
// them max-min fairly:
//
// Every account that is active (charged or asked for within ActiveFor)
// is guaranteed the same level c of the window's budget; an account that
// has already used more than c keeps what it used (bytes served are
// spent) and gets nothing more. c is the largest level with
//
//	Σ over active accounts of max(used, c)  =  budget − bytes of inactive accounts
//
// so that whatever the other active accounts still claim up to c stays
// available to them. An account is served while its usage is below c.
// With a single active account c is the whole budget (the old per-node
// rule). When one origin is hot and another small, the hot one reaches c
// first and its clients are redirected, while the small one keeps being
// served until it, too, has used c; an idle origin's claim lapses after
// ActiveFor, and the hot one may then use what it leaves.
//
// Bounds and costs. Admission is a map lookup under a read lock and two
// atomic loads; charging an atomic add (the account is resolved once per
// response). c is recomputed at most every levelEvery, or after a
// thousandth of the budget has been charged since the last computation,
// by whichever request comes first, in O(n log n) for n accounts without
// anyone waiting for it. The table holds at most MaxAccounts accounts per
// window; once it is full, further accounts share one overflow account,
// so memory is bounded however many origin names clients invent.
//
// Accounts. An origin's account is its address, as for the download
// bound per origin address (max_address_downloads), once this proxy has
// connected to it (LearnAddress): a wildcard domain, or many names of one
// machine, is one account. Until then, and for an origin this proxy has
// only fetched from peers, the account is the origin host name.

// Defaults of the fair shares.
const (
	// DefaultMaxAccounts: 1024 accounts per window, about 100 KiB. Few
	// sites draw a measurable share of one proxy's budget in a window; the
	// rest of a hostile crowd of names shares the overflow account, so an
	// attacker with many names dilutes the others' level to at most
	// 1/1025 of the budget, not to nothing.
	DefaultMaxAccounts = 1024
	// DefaultActiveFor: an origin not asked for in 10 minutes gives up its
	// claim on the budget. A live crowd asks every second; a site whose
	// crowd has left should not keep budget from one that still has one.
	DefaultActiveFor = 10 * time.Minute
	// levelEvery bounds how stale the level is in time.
	levelEvery = 100 * time.Millisecond
	// levelBytesDivisor: the level is also recomputed once budget/1000
	// bytes have been charged since the last computation.
	levelBytesDivisor = 1000
	// overflowAccount is the account of everything past MaxAccounts.
	overflowAccount = "\x00overflow"
)

// Decision is what a budget decides for one request.
type Decision uint8

const (
	// NoBudget: there is no budget (a nil *Budget).
	NoBudget Decision = iota
	// WithinShare: served; the account is below its fair share (or the
	// budget has no shares and is not exhausted).
	WithinShare
	// OverShare: redirected; the account has used its fair share while
	// others still claim theirs.
	OverShare
	// Exhausted: redirected; the whole budget of the window is used.
	Exhausted
)

// String is the decision's metric label.
func (d Decision) String() string {
	switch d {
	case WithinShare:
		return "within_share"
	case OverShare:
		return "over_share"
	case Exhausted:
		return "exhausted"
	}
	return "no_budget"
}

// shareTable is one window's accounts.
type shareTable struct {
	mu       sync.RWMutex
	accounts map[string]*account
	// level is c in bytes (a fresh table: the whole budget).
	level     atomic.Int64
	computing sync.Mutex   // held while c is recomputed; TryLock'ed
	computed  atomic.Int64 // UnixNano of the last computation
	charged   atomic.Int64 // bytes charged since the last computation
}

// account is one origin's usage in a window.
type account struct {
	used     atomic.Int64
	lastSeen atomic.Int64 // UnixNano of the last request or charge
}

func newShareTable(limit int64) *shareTable {
	t := &shareTable{accounts: make(map[string]*account)}
	t.level.Store(limit)
	return t
}

// find returns the account of key, nil if it has none.
func (t *shareTable) find(key string) *account {
	t.mu.RLock()
	a := t.accounts[key]
	t.mu.RUnlock()
	return a
}

// open returns the account of key, making it (or, when the table is full,
// returning the overflow account).
func (t *shareTable) open(key string, max int) *account {
	if a := t.find(key); a != nil {
		return a
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.accounts[key]; a != nil {
		return a
	}
	if len(t.accounts) >= max {
		key = overflowAccount
		if a := t.accounts[key]; a != nil {
			return a
		}
	}
	a := &account{}
	t.accounts[key] = a
	return a
}

// touch marks a as active at now, writing only when the second changed
// (so that a hot account's cache line is not written by every request).
func (a *account) touch(now int64) {
	if now-a.lastSeen.Load() >= int64(time.Second) {
		a.lastSeen.Store(now)
	}
}

// fairLevel is c for the usages of the active accounts and what remains
// for them (the budget less the bytes of inactive accounts): the largest
// c with Σ max(used, c) = remaining, or 0 when their usage alone already
// reaches remaining. used is sorted in place.
func fairLevel(used []int64, remaining int64) int64 {
	if len(used) == 0 {
		return max(remaining, 0)
	}
	slices.Sort(used)
	// With the k smallest at or below c: k·c + Σ used[k:] = remaining.
	var rest int64 // Σ used[k:]
	for k := len(used); k >= 1; k-- {
		c := (remaining - rest) / int64(k)
		if c >= used[k-1] && (k == len(used) || c <= used[k]) {
			return c
		}
		rest += used[k-1]
	}
	return 0
}

// recompute sets c from the accounts, unless another request is at it.
func (t *shareTable) recompute(limit int64, activeFor time.Duration, now int64) {
	if !t.computing.TryLock() {
		return
	}
	defer t.computing.Unlock()
	t.computed.Store(now)
	t.charged.Store(0)
	remaining := limit
	t.mu.RLock()
	used := make([]int64, 0, len(t.accounts))
	for _, a := range t.accounts {
		u := a.used.Load()
		if now-a.lastSeen.Load() > int64(activeFor) {
			remaining -= u
			continue
		}
		used = append(used, u)
	}
	t.mu.RUnlock()
	t.level.Store(fairLevel(used, remaining))
}

// stale reports whether c should be recomputed at now.
func (t *shareTable) stale(limit int64, now int64) bool {
	return now-t.computed.Load() >= int64(levelEvery) || t.charged.Load() >= max(limit/levelBytesDivisor, 1)
}

// AccountShare is one account's usage, for tests, experiments and the
// status of the budget.
type AccountShare struct {
	Account string
	Used    int64
	Active  bool
}

// Shares returns the accounts of now's window, most used first, and the
// current level c (the whole budget when the budget has no shares).
func (b *Budget) Shares(now time.Time) (level int64, accounts []AccountShare) {
	if b == nil {
		return 0, nil
	}
	w := b.current(now)
	if w.shares == nil {
		return b.limit, nil
	}
	w.shares.recompute(b.limit, b.activeFor, now.UnixNano())
	w.shares.mu.RLock()
	for k, a := range w.shares.accounts {
		accounts = append(accounts, AccountShare{Account: k, Used: a.used.Load(), Active: now.UnixNano()-a.lastSeen.Load() <= int64(b.activeFor)})
	}
	w.shares.mu.RUnlock()
	slices.SortFunc(accounts, func(x, y AccountShare) int {
		return cmp.Or(cmp.Compare(y.Used, x.Used), strings.Compare(x.Account, y.Account))
	})
	return w.shares.level.Load(), accounts
}

// ---------------------------------------------------------------------
// Origin addresses.

// originAddrSlots is the size of the memory of origin addresses: a
// direct-mapped table, so bounded by construction; a name whose slot
// another took is counted under its name again until it is next fetched.
const originAddrSlots = 4096

type originAddr struct {
	host, account string
}

// originAddrs remembers, per origin host name, the account of the address
// this proxy last connected to for it.
type originAddrs struct {
	seed  maphash.Seed
	slots [originAddrSlots]atomic.Pointer[originAddr]
}

func newOriginAddrs() *originAddrs { return &originAddrs{seed: maphash.MakeSeed()} }

func (m *originAddrs) slot(host string) *atomic.Pointer[originAddr] {
	return &m.slots[maphash.String(m.seed, host)%originAddrSlots]
}

// learn notes that host was reached at addr.
func (m *originAddrs) learn(host string, addr netip.Addr) {
	if m == nil || host == "" || !addr.IsValid() {
		return
	}
	s := m.slot(host)
	acct := addr.Unmap().WithZone("").String()
	if e := s.Load(); e != nil && e.host == host && e.account == acct {
		return
	}
	s.Store(&originAddr{host: host, account: acct})
}

// account is host's account: its address when known, else the name.
func (m *originAddrs) account(host string) string {
	if m == nil {
		return host
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	if e := m.slot(host).Load(); e != nil && e.host == host {
		return e.account
	}
	return host
}
