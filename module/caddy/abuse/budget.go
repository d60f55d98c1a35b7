package abuse

import (
	"math"
	"net/netip"
	"sync/atomic"
	"time"
)

// DefaultBudgetWindow: the bandwidth budget, off by default (a proxy
// should serve what it can unless its operator has a quota to keep),
// counts per day when no window is given, because hosting quotas are
// agreed per day or month, and a day bounds how long an exhausted budget
// keeps the proxy redirecting.
const DefaultBudgetWindow = 24 * time.Hour

// ---------------------------------------------------------------------
// Bandwidth budget.

// Budget is the number of bytes the proxy may serve per window,
// CoralCDN's per-node budget. Windows are aligned on multiples of the
// window since the Unix epoch, so a 24 h window is the UTC day and a 1 h
// window the clock hour. Accounting is a lock-free atomic add; the window
// rolls over on the first call that sees a later time. Responses in
// progress when the budget runs out are finished, so the budget can be
// overrun by what they still send.
//
// A budget made by NewFairBudget also shares itself among origins
// (fairshare.go): Admit then redirects an origin that has used its fair
// share while others still claim theirs, not only every origin once the
// whole budget is used.
type Budget struct {
	limit  int64
	window int64 // nanoseconds
	cur    atomic.Pointer[budgetWindow]

	// Fair shares (nil shares: one counter for the node).
	fair        bool
	maxAccounts int
	activeFor   time.Duration
	addrs       *originAddrs
}

type budgetWindow struct {
	index  int64 // UnixNano / window
	used   atomic.Int64
	shares *shareTable // nil without fair shares
}

// NewBudget returns a budget of bytes per window
// (DefaultBudgetWindow if ≤ 0). bytes ≤ 0 means no budget: the result is
// nil, which is never exceeded.
func NewBudget(bytes int64, window time.Duration) *Budget {
	if bytes <= 0 {
		return nil
	}
	if window <= 0 {
		window = DefaultBudgetWindow
	}
	b := &Budget{limit: bytes, window: int64(window)}
	b.cur.Store(&budgetWindow{index: math.MinInt64})
	return b
}

// NewFairBudget is NewBudget with the budget shared max-min fairly among
// origin accounts (see fairshare.go): at most maxAccounts a window
// (DefaultMaxAccounts if ≤ 0), an account idle for activeFor
// (DefaultActiveFor if ≤ 0) giving up its claim.
func NewFairBudget(bytes int64, window time.Duration, maxAccounts int, activeFor time.Duration) *Budget {
	b := NewBudget(bytes, window)
	if b == nil {
		return nil
	}
	if maxAccounts <= 0 {
		maxAccounts = DefaultMaxAccounts
	}
	if activeFor <= 0 {
		activeFor = DefaultActiveFor
	}
	b.fair, b.maxAccounts, b.activeFor, b.addrs = true, maxAccounts, activeFor, newOriginAddrs()
	b.cur.Store(&budgetWindow{index: math.MinInt64, shares: newShareTable(bytes)})
	return b
}

// Fair reports whether the budget is shared among origins.
func (b *Budget) Fair() bool { return b != nil && b.fair }

// current returns the window now falls in. A time before the current
// window (a clock step back) counts in the current window.
func (b *Budget) current(now time.Time) *budgetWindow {
	idx := now.UnixNano() / b.window
	w := b.cur.Load()
	for w.index < idx {
		nw := &budgetWindow{index: idx}
		if b.fair {
			nw.shares = newShareTable(b.limit)
		}
		if b.cur.CompareAndSwap(w, nw) {
			return nw
		}
		w = b.cur.Load()
	}
	return w
}

// Exceeded reports whether the bytes served in now's window have reached
// the budget.
func (b *Budget) Exceeded(now time.Time) bool {
	if b == nil {
		return false
	}
	return b.current(now).used.Load() >= b.limit
}

// Add counts n bytes served at now.
func (b *Budget) Add(n int64, now time.Time) {
	if b == nil || n <= 0 {
		return
	}
	b.current(now).used.Add(n)
}

// Used is the number of bytes counted in now's window.
func (b *Budget) Used(now time.Time) int64 {
	if b == nil {
		return 0
	}
	return b.current(now).used.Load()
}

// Admit decides a request for origin (a host name or address) at now:
// WithinShare to serve it, OverShare or Exhausted to redirect it.
func (b *Budget) Admit(origin string, now time.Time) Decision {
	if b == nil {
		return NoBudget
	}
	w := b.current(now)
	if w.used.Load() >= b.limit {
		return Exhausted
	}
	t := w.shares
	if t == nil {
		return WithinShare
	}
	ns := now.UnixNano()
	a := t.find(b.addrs.account(origin))
	if a != nil {
		a.touch(ns)
	}
	if t.stale(b.limit, ns) {
		t.recompute(b.limit, b.activeFor, ns)
	}
	if a != nil && a.used.Load() >= t.level.Load() {
		return OverShare
	}
	return WithinShare
}

// Charge returns what counts the bytes of one response for origin. The
// account is resolved at the first bytes, by when a download has
// connected to the origin (LearnAddress), and again if the window
// rolls over while the response is sent.
func (b *Budget) Charge(origin string, now func() time.Time) func(n int64) {
	if b == nil {
		return nil
	}
	if !b.fair {
		return func(n int64) { b.Add(n, now()) }
	}
	var w *budgetWindow
	var a *account
	return func(n int64) {
		if n <= 0 {
			return
		}
		at := now()
		cur := b.current(at)
		if cur != w {
			w, a = cur, cur.shares.open(b.addrs.account(origin), b.maxAccounts)
		}
		cur.used.Add(n)
		a.used.Add(n)
		a.touch(at.UnixNano())
		cur.shares.charged.Add(n)
	}
}

// LearnAddress notes that origin (a host name) was reached at addr: its
// bytes count in the account of addr from then on.
func (b *Budget) LearnAddress(origin string, addr netip.Addr) {
	if b != nil && b.fair {
		b.addrs.learn(origin, addr)
	}
}

// Limit is the budget's bytes per window (0 for a nil budget).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}
