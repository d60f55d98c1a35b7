package abuse

import (
	"math"
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
type Budget struct {
	limit  int64
	window int64 // nanoseconds
	cur    atomic.Pointer[budgetWindow]
}

type budgetWindow struct {
	index int64 // UnixNano / window
	used  atomic.Int64
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

// current returns the window now falls in. A time before the current
// window (a clock step back) counts in the current window.
func (b *Budget) current(now time.Time) *budgetWindow {
	idx := now.UnixNano() / b.window
	w := b.cur.Load()
	for w.index < idx {
		nw := &budgetWindow{index: idx}
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
