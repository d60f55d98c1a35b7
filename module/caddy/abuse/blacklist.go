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

// blockSet maps names to what they block.
type blockSet struct {
	names map[string]uint8
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
	return b.set.Load().match(host)
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

// match reports whether host is blocked. No allocation unless host has
// upper-case letters.
func (s *blockSet) match(host string) bool {
	if len(s.names) == 0 {
		return false
	}
	host = coralname.CanonicalHost(host)
	if host == "" {
		return false
	}
	if s.names[host]&blockName != 0 {
		return true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' && s.names[host[i+1:]]&blockSubs != 0 {
			return true
		}
	}
	return false
}

// parseBlacklist parses a blacklist file. bad lists the lines skipped, as
// "line N: reason".
func parseBlacklist(data []byte) (set *blockSet, bad []string) {
	set = &blockSet{names: make(map[string]uint8)}
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	for n, line := range strings.Split(string(data), "\n") {
		entry, _, _ := strings.Cut(line, "#")
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, bits, reason := parseBlacklistEntry(entry)
		if reason != "" {
			bad = append(bad, fmt.Sprintf("line %d: %q: %s", n+1, entry, reason))
			continue
		}
		set.names[name] |= bits
	}
	return set, bad
}

// parseBlacklistEntry parses one entry (comment and spaces removed).
func parseBlacklistEntry(entry string) (name string, bits uint8, reason string) {
	if strings.ContainsAny(entry, " \t\v\f\r") {
		return "", 0, "one name per line"
	}
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
