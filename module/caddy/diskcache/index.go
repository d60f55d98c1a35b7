package diskcache

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"unsafe"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/internal/offheap"
)

// The index: one fixed-size entry per complete object, in chunks of a
// few thousand entries that never move, and an open-addressing table of
// entry numbers, so that a million objects take a few large pointer-free
// allocations (no per-object Go object, string or map entry for the
// garbage collector to scan) and about 90 bytes each (TestIndexMemory).
// An object is known by its name (objName): 20 bytes, the key itself for
// the proxy's keys (40 lowercase hex digits, a SHA-1), the first 20 bytes
// of the key's SHA-256 for any other key. The key is not kept: a 40-hex
// key is its name, any other is read back from the object's metadata when
// a Walk or Range must report it. See the package docs ("Memory").

// nameLen is the length of an object name in bytes.
const nameLen = 20

// objName identifies an object: its key's bytes (hashed false: the key is
// the 40 hex digits of b) or the start of its SHA-256 (hashed true).
type objName struct {
	b      [nameLen]byte
	hashed bool
}

// nameOf returns the name of key.
func nameOf(key string) objName {
	var n objName
	if b, ok := coralname.ParseCacheKey(key); ok {
		return objName{b: b}
	}
	sum := sha256.Sum256([]byte(key))
	copy(n.b[:], sum[:nameLen])
	n.hashed = true
	return n
}

// String is the name as files use it: the key for a 40-hex key, else "x"
// and 40 hex digits. The two forms cannot collide ('x' is not a hex
// digit).
func (n objName) String() string {
	var b [1 + 2*nameLen]byte
	hex.Encode(b[1:], n.b[:])
	if n.hashed {
		b[0] = 'x'
		return string(b[:])
	}
	return string(b[1:])
}

// key returns the key when the name holds it.
func (n objName) key() (string, bool) {
	if n.hashed {
		return "", false
	}
	return n.String(), true
}

// parseName is the inverse of String.
func parseName(s string) (objName, bool) {
	var n objName
	if len(s) == 1+2*nameLen && s[0] == 'x' {
		s, n.hashed = s[1:], true
	}
	if len(s) != 2*nameLen || !isLowerHex(s) {
		return objName{}, false
	}
	hex.Decode(n.b[:], []byte(s))
	return n, true
}

// entry is one complete object: 80 bytes, no pointers.
type entry struct {
	name    [nameLen]byte
	hashed  bool
	inline  bool // one file, body and metadata (see files.go); else two
	live    bool // the slot holds an object
	listed  bool // in the LRU list (always, once Open is done)
	metaLen int32
	slot    int32 // its own number
	// LRU neighbours (slot numbers, -1 for none); next also links the
	// free slots.
	prev, next int32
	hot        int32 // 1 + its slot in the hot set; 0 or hotSeen: metadata not cached
	readers    int32 // open Readers of the complete version (held.go)
	gen        uint64
	size       int64  // the body's length
	used       int64  // last Get or Commit, Unix nanoseconds
	mark       uint64 // the caller's word (marks.go); 0: none
}

func (e *entry) objName() objName { return objName{e.name, e.hashed} }

// version identifies the files of one complete version, for removal.
type version struct {
	name    objName
	gen     uint64
	inline  bool
	size    int64 // inline: the body's length
	metaLen int32 // inline: the metadata's length
}

func (e *entry) version() version {
	return version{e.objName(), e.gen, e.inline, e.size, e.metaLen}
}

// entryChunk is how many entries one allocation holds (320 KiB).
const entryChunk = 4096

// index maps names to entries. Guarded by Store.mu.
type index struct {
	seed maphash.Seed
	*indexArrays
	free   int32 // first free slot, -1 if none
	n      int   // live entries
	marked int   // live entries with a mark
}

// indexArrays are the index's large arrays, outside the Go heap
// (offheap.Make, see "Memory" in the package docs). They are given back
// when the Store is gone (Open's cleanup), not at Close: a Reader may
// outlive Close and still note its end in its entry.
type indexArrays struct {
	chunks []*[entryChunk]entry
	table  []int32 // 1 + slot, 0 empty; linear probing, at most half full
}

func newIndex() index {
	return index{seed: maphash.MakeSeed(), free: -1, indexArrays: &indexArrays{table: offheap.Make[int32](64)}}
}

// release gives the arrays back. Nothing may use them afterwards.
func (a *indexArrays) release() {
	for _, c := range a.chunks {
		offheap.Free(c[:])
	}
	offheap.Free(a.table)
	a.chunks, a.table = nil, nil
}

// at returns entry i (i >= 0).
func (x *index) at(i int32) *entry {
	return &x.chunks[i/entryChunk][i%entryChunk]
}

func (x *index) home(n *[nameLen]byte) int {
	return int(maphash.Bytes(x.seed, n[:]) & uint64(len(x.table)-1))
}

// lookup returns the entry of n, or nil.
func (x *index) lookup(n objName) *entry {
	for i := x.home(&n.b); ; i = (i + 1) & (len(x.table) - 1) {
		t := x.table[i]
		if t == 0 {
			return nil
		}
		if e := x.at(t - 1); e.name == n.b && e.hashed == n.hashed {
			return e
		}
	}
}

// add returns a new entry for n, which must not have one; it is in no
// list.
func (x *index) add(n objName) *entry {
	if 2*(x.n+1) > len(x.table) {
		x.grow()
	}
	if x.free < 0 {
		c := (*[entryChunk]entry)(offheap.Make[entry](entryChunk))
		base := int32(len(x.chunks)) * entryChunk
		x.chunks = append(x.chunks, c)
		for i := entryChunk - 1; i >= 0; i-- {
			c[i].slot, c[i].next = base+int32(i), x.free
			x.free = base + int32(i)
		}
	}
	e := x.at(x.free)
	x.free = e.next
	*e = entry{name: n.b, hashed: n.hashed, live: true, slot: e.slot, prev: -1, next: -1}
	x.place(e)
	x.n++
	return e
}

func (x *index) place(e *entry) {
	i := x.home(&e.name)
	for x.table[i] != 0 {
		i = (i + 1) & (len(x.table) - 1)
	}
	x.table[i] = e.slot + 1
}

func (x *index) grow() {
	old := x.table
	x.table = offheap.Make[int32](2 * len(old))
	for _, t := range old {
		if t != 0 {
			x.place(x.at(t - 1))
		}
	}
	offheap.Free(old)
}

// remove frees e's slot (e must be out of the LRU list).
func (x *index) remove(e *entry) {
	mask := len(x.table) - 1
	i := x.home(&e.name)
	for x.table[i] != e.slot+1 {
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later members of the probe run into
	// the hole when their home is not between the hole and them.
	for j := (i + 1) & mask; x.table[j] != 0; j = (j + 1) & mask {
		h := x.home(&x.at(x.table[j] - 1).name)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			x.table[i] = x.table[j]
			i = j
		}
	}
	x.table[i] = 0
	if e.mark != 0 {
		x.marked--
	}
	slot := e.slot
	*e = entry{slot: slot, prev: -1, next: x.free}
	x.free = slot
	x.n--
}

// each calls fn for every live entry until it returns false.
func (x *index) each(fn func(*entry) bool) {
	for _, c := range x.chunks {
		for i := range c {
			if c[i].live && !fn(&c[i]) {
				return
			}
		}
	}
}

// bytes is the memory the index holds: its chunks and its table.
func (x *index) bytes() int64 {
	return int64(len(x.chunks))*int64(unsafe.Sizeof([entryChunk]entry{})) + 4*int64(len(x.table)) +
		8*int64(cap(x.chunks))
}

// slots is the number of slots allocated (live or free).
func (x *index) slots() int { return len(x.chunks) * entryChunk }
