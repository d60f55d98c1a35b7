//go:build linux

package hostilelab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SampleEvery is how often the sampler reads a proxy's state.
const SampleEvery = 250 * time.Millisecond

// Sample is one reading of a proxy's state.
type Sample struct {
	At time.Time
	// RSS is the resident set size (VmRSS), bytes.
	RSS int64
	// FDs is the number of open file descriptors.
	FDs int
	// Goroutines is go_goroutines from the admin API's /metrics (-1 when
	// it could not be read).
	Goroutines int
	// Disk is the space the cache uses: the allocated blocks of every file
	// under the cache directory plus those of files under it that were
	// unlinked but are still open (a reader of a replaced version), bytes.
	Disk int64
	// Unlinked is the part of Disk in unlinked files.
	Unlinked int64
}

// Sample reads the proxy's state now.
func (p *Proxy) Sample() (Sample, error) {
	s := Sample{At: time.Now(), Goroutines: -1}
	pid := p.Pid()
	rss, err := vmRSS(pid)
	if err != nil {
		return s, err
	}
	s.RSS = rss
	s.FDs, s.Unlinked, err = openFiles(pid, p.CacheDir)
	if err != nil {
		return s, err
	}
	disk, err := diskUsed(p.CacheDir)
	if err != nil {
		return s, err
	}
	s.Disk = disk + s.Unlinked
	if g, err := p.goroutines(); err == nil {
		s.Goroutines = g
	}
	return s, nil
}

func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// openFiles counts the process's open descriptors and sums the allocated
// size of the unlinked files under dir it holds open (each inode once).
func openFiles(pid int, dir string) (n int, unlinked int64, err error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return 0, 0, err
	}
	seen := map[uint64]bool{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		n++
		if !strings.HasSuffix(target, " (deleted)") || !strings.HasPrefix(target, dir+"/") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(fdDir, e.Name()), &st) != nil || seen[st.Ino] {
			continue
		}
		seen[st.Ino] = true
		unlinked += st.Blocks * 512
	}
	return n, unlinked, nil
}

// diskUsed sums the allocated blocks of everything under dir.
func diskUsed(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) == nil {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

// goroutines reads go_goroutines from the admin API's /metrics.
func (p *Proxy) goroutines() (int, error) {
	b, err := p.adminGet("/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("go_goroutines ")); ok {
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
			return int(f), err
		}
	}
	return 0, errors.New("no go_goroutines in /metrics")
}

// Peaks are the largest values of a stretch of samples.
type Peaks struct {
	RSS        int64
	FDs        int
	Goroutines int
	Disk       int64
	Unlinked   int64
	Samples    int
	Errors     int
}

func (pk *Peaks) add(s Sample) {
	pk.Samples++
	pk.RSS = max(pk.RSS, s.RSS)
	pk.FDs = max(pk.FDs, s.FDs)
	pk.Goroutines = max(pk.Goroutines, s.Goroutines)
	pk.Disk = max(pk.Disk, s.Disk)
	pk.Unlinked = max(pk.Unlinked, s.Unlinked)
}

// sampler samples proxies every SampleEvery until stopped.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak map[*Proxy]*Peaks
}

func startSampler(ps ...*Proxy) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), peak: map[*Proxy]*Peaks{}}
	for _, p := range ps {
		s.peak[p] = &Peaks{Goroutines: -1}
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(SampleEvery)
		defer t.Stop()
		for {
			for _, p := range ps {
				smp, err := p.Sample()
				s.mu.Lock()
				if err != nil {
					s.peak[p].Errors++
				} else {
					s.peak[p].add(smp)
				}
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops the sampler and returns the peaks per proxy.
func (s *sampler) finish() map[*Proxy]Peaks {
	close(s.stop)
	<-s.done
	out := map[*Proxy]Peaks{}
	for p, pk := range s.peak {
		out[p] = *pk
	}
	return out
}
