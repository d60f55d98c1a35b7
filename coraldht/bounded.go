package coraldht

// boundedMap is the shape of every table a peer can make a node fill
// (replay windows, peer records, per-key load counters, recent
// verifications): at most max entries, and at most perGroup of them in
// any one group (a source prefix), so one prefix cannot push the others
// out. Inserting beyond a bound evicts the least recently used entry of
// the group, or of the whole map. Every operation takes constant time.
// It is not safe for concurrent use; its owner locks.
type boundedMap[K, G comparable, V any] struct {
	max, perGroup int // perGroup 0: no group bound
	entries       map[K]*boundedEntry[K, G, V]
	all           lruList[K, G, V]
	groups        map[G]*lruList[K, G, V]
	// onEvict, if set, hears of every entry evicted by a bound (not of
	// those removed).
	onEvict func(K, V)
}

type boundedEntry[K, G comparable, V any] struct {
	key   K
	group G
	val   V
	// links in the map's list and the group's list, most recent first
	prev, next, gprev, gnext *boundedEntry[K, G, V]
}

// lruList is a list of entries, most recently used first. group selects
// which pair of links it uses.
type lruList[K, G comparable, V any] struct {
	head, tail *boundedEntry[K, G, V]
	n          int
	group      bool
}

func (l *lruList[K, G, V]) links(e *boundedEntry[K, G, V]) (prev, next **boundedEntry[K, G, V]) {
	if l.group {
		return &e.gprev, &e.gnext
	}
	return &e.prev, &e.next
}

func (l *lruList[K, G, V]) pushFront(e *boundedEntry[K, G, V]) {
	prev, next := l.links(e)
	*prev, *next = nil, l.head
	if l.head != nil {
		hp, _ := l.links(l.head)
		*hp = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
	l.n++
}

func (l *lruList[K, G, V]) remove(e *boundedEntry[K, G, V]) {
	prev, next := l.links(e)
	if *prev != nil {
		_, pn := l.links(*prev)
		*pn = *next
	} else {
		l.head = *next
	}
	if *next != nil {
		np, _ := l.links(*next)
		*np = *prev
	} else {
		l.tail = *prev
	}
	*prev, *next = nil, nil
	l.n--
}

func newBoundedMap[K, G comparable, V any](max, perGroup int) *boundedMap[K, G, V] {
	return &boundedMap[K, G, V]{max: max, perGroup: perGroup, entries: make(map[K]*boundedEntry[K, G, V]),
		groups: make(map[G]*lruList[K, G, V])}
}

func (m *boundedMap[K, G, V]) len() int { return len(m.entries) }

// get returns the value under k without touching it.
func (m *boundedMap[K, G, V]) get(k K) (V, bool) {
	if e := m.entries[k]; e != nil {
		return e.val, true
	}
	var zero V
	return zero, false
}

// touch marks k as used now.
func (m *boundedMap[K, G, V]) touch(k K) {
	e := m.entries[k]
	if e == nil || m.all.head == e {
		return
	}
	m.all.remove(e)
	m.all.pushFront(e)
	g := m.groups[e.group]
	g.remove(e)
	g.pushFront(e)
}

// put inserts v under k in group g as the most recently used entry,
// evicting as the bounds require. k must not be present.
func (m *boundedMap[K, G, V]) put(k K, g G, v V) {
	if gl := m.groups[g]; gl != nil && m.perGroup > 0 && gl.n >= m.perGroup {
		m.evict(gl.tail)
	}
	if len(m.entries) >= m.max && m.all.tail != nil {
		m.evict(m.all.tail)
	}
	gl := m.groups[g]
	if gl == nil {
		gl = &lruList[K, G, V]{group: true}
		m.groups[g] = gl
	}
	e := &boundedEntry[K, G, V]{key: k, group: g, val: v}
	m.entries[k] = e
	m.all.pushFront(e)
	gl.pushFront(e)
}

func (m *boundedMap[K, G, V]) evict(e *boundedEntry[K, G, V]) {
	m.remove(e.key)
	if m.onEvict != nil {
		m.onEvict(e.key, e.val)
	}
}

// remove deletes k.
func (m *boundedMap[K, G, V]) remove(k K) {
	e := m.entries[k]
	if e == nil {
		return
	}
	delete(m.entries, k)
	m.all.remove(e)
	g := m.groups[e.group]
	g.remove(e)
	if g.n == 0 {
		delete(m.groups, e.group)
	}
}

// oldest returns the least recently used entry.
func (m *boundedMap[K, G, V]) oldest() (K, V, bool) {
	if e := m.all.tail; e != nil {
		return e.key, e.val, true
	}
	var k K
	var v V
	return k, v, false
}

// each calls f for every entry, most recently used first, until f
// returns false.
func (m *boundedMap[K, G, V]) each(f func(K, V) bool) {
	for e := m.all.head; e != nil; e = e.next {
		if !f(e.key, e.val) {
			return
		}
	}
}

// groupLen is how many entries group g holds.
func (m *boundedMap[K, G, V]) groupLen(g G) int {
	if gl := m.groups[g]; gl != nil {
		return gl.n
	}
	return 0
}
