package abuse

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coralname"
)

// DefaultBlacklistPoll: how often the blacklist file is checked for
// changes. A stat every 10 s costs nothing measurable, and an operator who
// edits the list sees it applied about as soon as they look. The
// blacklist itself is off unless a file is configured.
const DefaultBlacklistPoll = 10 * time.Second

// ---------------------------------------------------------------------
// Domain blacklist.

// Blacklist is a set of origin domains the proxy refuses, read from a
// file and reloaded when the file changes.
//
// The file has one entry per line; '#' starts a comment (whole line or
// after the entry); blank lines, surrounding spaces, a trailing "\r" and
// a leading byte-order mark are ignored:
//
//	example.com      # example.com and every name under it
//	*.example.org    # names under example.org, not example.org itself
//	192.0.2.7        # an IPv4 origin (Coralized as 192.0.2.7.nyud.net)
//
// Names are matched without regard to case or a trailing dot, by whole
// labels: "example.com" blocks "www.example.com" but not
// "badexample.com". Entries use the syntax of Coralized origins (LDH
// labels, '_' except in the last label); IDNs must be written in their
// xn-- form, since that is what requests carry.
//
// Loading: a missing or unreadable file, or a bad entry, is an error at
// startup, where the operator is looking (a skipped typo would silently
// serve a site that must be refused). Afterwards the file is checked every
// poll interval (mtime, size and identity; its content hash decides), bad
// entries are logged with their line numbers and skipped, and a file that
// disappears or cannot be read keeps the last list in force, logged once.
// Replace the file by renaming a complete new one over it: one written in
// place may be read half-written (the rest is picked up at the next
// check).
type Blacklist struct {
	path string
	logf func(format string, args ...any)
	set  atomic.Pointer[blockSet]

	mu      sync.Mutex // serializes check; guards the fields below
	fi      os.FileInfo
	sum     [sha256.Size]byte
	racy    bool   // the file was modified too recently for its mtime to tell a later change apart
	problem string // the error last logged, so it is logged once

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// blockSet maps names to what they block, and, for entries that expire,
// until when.
type blockSet struct {
	names map[string]uint8
	until map[nameBit]int64 // Unix seconds (nanoseconds end in 2262); a name and bit absent here never expire
}

// nameBit is one thing a name blocks: itself or the names under it.
type nameBit struct {
	name string
	bit  uint8
}

func newBlockSet() *blockSet {
	return &blockSet{names: make(map[string]uint8), until: make(map[nameBit]int64)}
}

// add makes the set block what bits say of name until expires (never if
// zero). Of two entries for the same name and bit, the one that lasts
// longer wins.
func (s *blockSet) add(name string, bits uint8, expires time.Time) {
	for _, bit := range []uint8{blockName, blockSubs} {
		if bits&bit == 0 {
			continue
		}
		k := nameBit{name, bit}
		old, expiring := s.until[k]
		switch {
		case s.names[name]&bit == 0:
			s.names[name] |= bit
			if !expires.IsZero() {
				s.until[k] = expires.Unix()
			}
		case !expiring: // already blocked for good
		case expires.IsZero():
			delete(s.until, k)
		default:
			s.until[k] = max(old, expires.Unix())
		}
	}
}

// blocks reports whether name's bit is set and has not expired at now
// (Unix seconds, read only when some entry expires).
func (s *blockSet) blocks(name string, bit uint8, now func() int64) bool {
	if s.names[name]&bit == 0 {
		return false
	}
	if len(s.until) == 0 {
		return true
	}
	u, ok := s.until[nameBit{name, bit}]
	return !ok || now() < u
}

const (
	blockName = 1 << iota // the name itself
	blockSubs             // every name under it
)

// racyWindow: a file modified within this long of being read may change
// again without its mtime changing (file systems keep mtime to 1 or 2 s on
// some platforms), so it is read again at the next check whatever stat
// says.
const racyWindow = 3 * time.Second

// maxReportedLines bounds the bad lines listed in one error or log entry.
const maxReportedLines = 10

// NewBlacklist loads the blacklist at path and, if every > 0, checks the
// file for changes every that long until Close. logf receives reloads and
// problems after startup (nil discards them).
func NewBlacklist(path string, every time.Duration, logf func(string, ...any)) (*Blacklist, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b := &Blacklist{path: path, logf: logf, stop: make(chan struct{}), done: make(chan struct{})}
	fi, data, sum, racy, err := b.read()
	if err != nil {
		return nil, fmt.Errorf("coral_proxy: blacklist: %w", err)
	}
	set, bad := parseBlacklist(data)
	if len(bad) > 0 {
		return nil, fmt.Errorf("coral_proxy: blacklist %s: %d bad %s: %s", path, len(bad), plural(len(bad), "line", "lines"), joinBad(bad))
	}
	b.fi, b.sum, b.racy = fi, sum, racy
	b.set.Store(set)
	if every > 0 {
		go b.poll(every)
	} else {
		close(b.done)
	}
	return b, nil
}

// Blocked reports whether host (an origin host name or IPv4 literal,
// without port) is on the list. It is safe for concurrent use and takes
// no lock.
func (b *Blacklist) Blocked(host string) bool {
	if b == nil {
		return false
	}
	return b.set.Load().match(host, time.Now)
}

// entries is the number of entries in force.
func (b *Blacklist) entries() int {
	if b == nil {
		return 0
	}
	return len(b.set.Load().names)
}

// Close stops the polling. It waits for a check under way to finish and
// may be called more than once.
func (b *Blacklist) Close() {
	if b == nil {
		return
	}
	b.closeOnce.Do(func() { close(b.stop) })
	<-b.done
}

func (b *Blacklist) poll(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.check()
		}
	}
}

// check reloads the list if the file changed, and reports whether it did.
// Problems are logged, never returned: the last list stays in force.
func (b *Blacklist) check() (reloaded bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fi, err := os.Stat(b.path)
	if err != nil {
		b.report(err)
		return false
	}
	if !b.racy && b.problem == "" && os.SameFile(fi, b.fi) && fi.Size() == b.fi.Size() && fi.ModTime().Equal(b.fi.ModTime()) {
		return false
	}
	fi, data, sum, racy, err := b.read()
	if err != nil {
		b.report(err)
		return false
	}
	if b.problem != "" {
		b.logf("coral_proxy: blacklist %s: readable again", b.path)
		b.problem = ""
	}
	b.fi, b.racy = fi, racy
	if sum == b.sum {
		return false // touched, or a racy file read again: same content
	}
	b.sum = sum
	set, bad := parseBlacklist(data)
	if len(bad) > 0 {
		b.logf("coral_proxy: blacklist %s: skipped %d bad %s: %s", b.path, len(bad), plural(len(bad), "line", "lines"), joinBad(bad))
	}
	b.set.Store(set)
	b.logf("coral_proxy: blacklist %s reloaded: %d %s", b.path, len(set.names), plural(len(set.names), "entry", "entries"))
	return true
}

// report logs a problem reading the file, once until it changes.
func (b *Blacklist) report(err error) {
	if msg := err.Error(); msg != b.problem {
		b.problem = msg
		b.logf("coral_proxy: blacklist: %v; keeping the last list read (%d %s)",
			err, b.entries(), plural(b.entries(), "entry", "entries"))
	}
}

// read reads the file, with its stat from the same open file.
func (b *Blacklist) read() (fi os.FileInfo, data []byte, sum [sha256.Size]byte, racy bool, err error) {
	f, err := os.Open(b.path)
	if err != nil {
		return nil, nil, sum, false, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, nil, sum, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, sum, false, fmt.Errorf("%s: not a regular file", b.path)
	}
	start := time.Now()
	if data, err = io.ReadAll(f); err != nil {
		return nil, nil, sum, false, err
	}
	racy = !fi.ModTime().Before(start.Add(-racyWindow))
	return fi, data, sha256.Sum256(data), racy, nil
}

// match reports whether host is blocked at the time now gives (called
// only when an entry that could match expires). No allocation unless host
// has upper-case letters.
func (s *blockSet) match(host string, now func() time.Time) bool {
	if len(s.names) == 0 {
		return false
	}
	host = coralname.CanonicalHost(host)
	if host == "" {
		return false
	}
	var at int64
	read := false
	clock := func() int64 {
		if !read {
			at, read = now().Unix(), true
		}
		return at
	}
	if s.blocks(host, blockName, clock) {
		return true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' && s.blocks(host[i+1:], blockSubs, clock) {
			return true
		}
	}
	return false
}

// parseBlacklist parses a blacklist file. bad lists the lines skipped, as
// "line N: reason".
func parseBlacklist(data []byte) (set *blockSet, bad []string) {
	entries, bad := ParseEntries(data)
	set = newBlockSet()
	for _, e := range entries {
		set.addEntry(e)
	}
	return set, bad
}

// ParseEntries parses the text of a list: a blacklist file, or what an
// operator signs (`caddy coral-blacklist sign`). bad lists the lines
// skipped, as "line N: reason".
func ParseEntries(data []byte) (entries []Entry, bad []string) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	for n, line := range strings.Split(string(data), "\n") {
		e, ok, problem := ParseEntry(line)
		switch {
		case problem != "":
			entry, _, _ := strings.Cut(line, "#")
			bad = append(bad, fmt.Sprintf("line %d: %q: %s", n+1, strings.TrimSpace(entry), problem))
		case ok:
			entries = append(entries, e)
		}
	}
	return entries, bad
}

// JoinProblems joins the bad lines of ParseEntries for a message, at
// most ten of them.
func JoinProblems(bad []string) string { return joinBad(bad) }

// addEntry adds a parsed entry.
func (s *blockSet) addEntry(e Entry) {
	name, bits := e.Name, uint8(blockName|blockSubs)
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, bits = rest, blockSubs
	}
	s.add(name, bits, e.Expires)
}

// Entry is one entry of a blacklist, a local file's or a signed list's.
type Entry struct {
	// Name is the origin name, in canonical form (lower case, no
	// trailing dot), with a leading "*." when only the names under it
	// are blocked.
	Name string
	// Expires is when the entry stops blocking; zero: never.
	Expires time.Time
	// Reason is the comment after the entry, if any.
	Reason string
}

// String is the entry as a line of a list.
func (e Entry) String() string {
	s := e.Name
	if !e.Expires.IsZero() {
		s += " expires=" + e.Expires.UTC().Format(time.RFC3339)
	}
	if e.Reason != "" {
		s += " # " + e.Reason
	}
	return s
}

// expiresPrefix starts an entry's optional second field.
const expiresPrefix = "expires="

// ParseEntry parses one line of a list: "NAME [expires=TIME] [# REASON]",
// TIME in RFC 3339 (2027-01-31T00:00:00Z) or a date (2027-01-31, midnight
// UTC). ok is false for a blank or comment line; problem says what is
// wrong with a bad one.
func ParseEntry(line string) (e Entry, ok bool, problem string) {
	entry, comment, _ := strings.Cut(line, "#")
	fields := strings.Fields(entry)
	if len(fields) == 0 {
		return Entry{}, false, ""
	}
	if len(fields) > 2 || len(fields) == 2 && !strings.HasPrefix(fields[1], expiresPrefix) {
		return Entry{}, false, "one name per line, then optionally expires=TIME"
	}
	if len(fields) == 2 {
		t, err := parseListTime(strings.TrimPrefix(fields[1], expiresPrefix))
		if err != nil {
			return Entry{}, false, err.Error()
		}
		e.Expires = t
	}
	name, bits, problem := parseBlacklistEntry(fields[0])
	if problem != "" {
		return Entry{}, false, problem
	}
	if bits == blockSubs {
		name = "*." + name
	}
	e.Name, e.Reason = name, cleanReason(comment)
	return e, true, ""
}

// cleanReason is a comment as an entry's reason: trimmed, control
// characters (a stray \r) dropped.
func cleanReason(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s))
}

// parseListTime reads a time of a list: RFC 3339, or a date meaning its
// midnight UTC.
func parseListTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Truncate(time.Second), nil // lists keep whole seconds
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2027-01-31T00:00:00Z) or a date (2027-01-31)", s)
}

// parseBlacklistEntry parses one entry's name.
func parseBlacklistEntry(entry string) (name string, bits uint8, reason string) {
	name, bits = entry, blockName|blockSubs
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, bits = rest, blockSubs
	}
	if strings.Contains(name, "*") {
		return "", 0, `a wildcard is allowed only as a leading "*."`
	}
	// The names of the list are origins' names: coralname's rules.
	name, ipv4, err := coralname.CheckDomain(name)
	var e *coralname.Error
	switch {
	case errors.As(err, &e):
		return "", 0, e.Detail
	case err != nil:
		return "", 0, err.Error()
	case ipv4 && bits == blockSubs:
		return "", 0, "a wildcard on an IP address"
	}
	return name, bits, ""
}

func joinBad(bad []string) string {
	s := strings.Join(bad[:min(len(bad), maxReportedLines)], "; ")
	if len(bad) > maxReportedLines {
		s += fmt.Sprintf("; and %d more", len(bad)-maxReportedLines)
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
