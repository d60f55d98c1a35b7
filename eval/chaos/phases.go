//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// phase is one step of the schedule: an event (a kill, a partition, ...)
// and the time until the clients saw no more failures.
type phase struct {
	Name string
	// What the event did, or why the phase was skipped.
	Note    string
	Skipped bool
	// Start is when the event began, Done when it was complete (an
	// upgrade or a rotation takes a while), End when the phase ended;
	// seconds since the load started.
	Start, Done, End float64
	// Bound is the most origin fetches of one object in this phase: one
	// per side of a partition, and one more in a phase that stops or
	// kills nodes (a download cut short by its proxy's end is started
	// again by another proxy).
	Bound int
}

// schedule runs the phases against a running network and load.
type schedule struct {
	net                  *coralnet.Net
	rec                  *recorder
	origin               *origin
	logf                 func(string, ...any)
	minimum              time.Duration // shortest observation after an event
	quiet                time.Duration // failure-free stretch that ends a phase
	timeout              time.Duration // longest a phase may take to recover
	newCoreDNS, newCaddy string
	phases               []*phase
	killed               []*coralnet.Node
	load                 *load
	drain                bool // drain each node before its upgrade
}

// run runs one phase: event, then the wait for a quiet stretch. A phase
// with a reason to skip it only records the reason.
func (s *schedule) run(ctx context.Context, name string, bound int, skip string, waveAfter bool, event func(context.Context) (string, error)) error {
	p := &phase{Name: name, Bound: bound, Start: s.rec.now()}
	s.phases = append(s.phases, p)
	if skip != "" {
		p.Note, p.Skipped, p.Done, p.End = skip, true, p.Start, p.Start
		s.logf("phase %s skipped: %s", name, skip)
		return nil
	}
	s.logf("phase %s", name)
	// Each phase after the first brings a new wave of objects the crowd
	// wants, so every phase has first fetches (on each side of a
	// partition) and peer fetches: from the start of the event, or with
	// waveAfter from its end.
	if len(s.phases) > 1 && !waveAfter {
		s.load.nextWave()
	}
	note, err := event(ctx)
	p.Note, p.Done = note, s.rec.now()
	if err != nil {
		p.End = s.rec.now()
		return fmt.Errorf("phase %s: %w", name, err)
	}
	if len(s.phases) > 1 && waveAfter {
		s.load.nextWave()
	}
	err = s.waitQuiet(ctx, p)
	p.End = s.rec.now()
	return err
}

// waitQuiet waits until at least minimum has passed since the event was
// done and the clients have had quiet without a failure (and with some
// successes), or timeout.
func (s *schedule) waitQuiet(ctx context.Context, p *phase) error {
	deadline := time.Now().Add(s.timeout)
	for {
		if err := s.net.Check(); err != nil {
			return err
		}
		now := s.rec.now()
		if now-p.Done >= s.minimum.Seconds() {
			var ok, failed int
			for _, r := range s.rec.between(now-s.quiet.Seconds(), now) {
				if r.OK {
					ok++
				} else {
					failed++
				}
			}
			if ok > 0 && failed == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("phase %s: clients still failing %v after the event", p.Name, s.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// warmup waits until the origin has served the first wave's objects.
func (s *schedule) warmup(ctx context.Context) (string, error) {
	for !s.origin.fetchedFirst(int(s.load.active.Load())) {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return "the crowd starts on the first wave of objects", nil
}

// upgrade replaces the nodes' binaries one node at a time: drain (with
// -drain: out of DNS answers, then until no client has used it for an
// answer TTL), stop (SIGTERM), start on the new binaries with the same
// disk cache, wait until the network sees it again.
func (s *schedule) upgrade(ctx context.Context) (string, error) {
	for _, nd := range s.net.Nodes {
		if s.drain {
			if err := s.drainNode(ctx, nd); err != nil {
				return "", err
			}
		}
		if err := s.net.StopNode(nd); err != nil {
			s.logf("  %s: %v", nd.Host.Name, err)
		}
		nd.CoreDNSBin, nd.CaddyBin = s.newCoreDNS, s.newCaddy
		if err := s.net.StartNode(nd); err != nil {
			return "", err
		}
		if err := s.waitReady(ctx); err != nil {
			return "", err
		}
	}
	how := "SIGTERM"
	if s.drain {
		how = "drain, SIGTERM"
	}
	return fmt.Sprintf("%d nodes, one at a time: %s, new binaries, same disk cache", len(s.net.Nodes), how), nil
}

// drainNode drains nd and waits until no client has sent it a request
// for AnswerTTL (the clients' cached answers naming it have expired).
func (s *schedule) drainNode(ctx context.Context, nd *coralnet.Node) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.net.Drain(ctx, nd); err != nil {
		return err
	}
	addr := nd.Addr().String()
	for {
		now := s.rec.now()
		used := false
		for _, r := range s.rec.between(now-coralnet.AnswerTTL, now) {
			if r.Proxy == addr {
				used = true
				break
			}
		}
		if !used {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still used by clients after its drain: %w", nd.Host.Name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *schedule) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return s.net.WaitReady(ctx)
}

// kill SIGKILLs a third of the nodes (CoreDNS and Caddy: the host is
// lost), spread over both regions, never node 0 (the bootstrap).
func (s *schedule) kill(context.Context) (string, error) {
	n := len(s.net.Nodes)
	count := max(1, n/3)
	var names []string
	for i := 0; i < count; i++ {
		nd := s.net.Nodes[1+i*(n-1)/count]
		s.net.KillNode(nd)
		s.killed = append(s.killed, nd)
		names = append(names, nd.Host.Name)
	}
	return "SIGKILL " + strings.Join(names, ", "), nil
}

// partition cuts region east's nodes off from region west's (clients,
// resolvers and the origin still reach both).
func (s *schedule) partition(context.Context) (string, error) {
	var east, west []*netns.Host
	for _, nd := range s.net.Nodes {
		if nd.Region == coralnet.RegionEast {
			east = append(east, nd.Host)
		} else {
			west = append(west, nd.Host)
		}
	}
	return fmt.Sprintf("nftables: %d east nodes | %d west nodes", len(east), len(west)), s.net.Lab.Partition(east, west)
}

func (s *schedule) heal(context.Context) (string, error) {
	return "nftables rules removed", s.net.Lab.Heal()
}

// restart starts the killed nodes again on their warm disk caches.
func (s *schedule) restart(ctx context.Context) (string, error) {
	var names []string
	for _, nd := range s.killed {
		if err := s.net.StartNode(nd); err != nil {
			return "", err
		}
		names = append(names, nd.Host.Name)
	}
	s.killed = nil
	return "restarted " + strings.Join(names, ", ") + " (warm disk caches)", s.waitReady(ctx)
}

// rotate rotates the network key in three steps, each a configuration
// reload of every node: install the new key as accepted, make it primary,
// remove the old one. It needs a build with the keyring (`key PRIMARY
// [ACCEPTED...]`; keyringMissing).
func (s *schedule) rotate(ctx context.Context) (string, error) {
	oldKey := s.net.KeyFile
	newKey := filepath.Join(s.net.Dir, "network2.key")
	if err := coraldht.WriteKeyFile(newKey); err != nil {
		return "", err
	}
	steps := []struct {
		what string
		keys []string
	}{{"install new key (accepted)", []string{oldKey, newKey}},
		{"new key primary", []string{newKey, oldKey}},
		{"old key removed", []string{newKey}}}
	for _, step := range steps {
		for _, nd := range s.net.Nodes {
			nd.Keys = step.keys
			nd.KeyDirective = true
			if err := s.net.Reload(ctx, nd); err != nil {
				return "", fmt.Errorf("%s: %w", step.what, err)
			}
		}
		s.logf("  %s: every node reloaded", step.what)
		if err := s.waitReady(ctx); err != nil {
			return "", err
		}
	}
	return "3 reloads of every node: accept new, new primary, old removed", nil
}

// keyringMissing says why caddy has no keyring ("" if it has one): it
// adapts a Caddyfile naming two keys.
func keyringMissing(caddy, dir string) string {
	f := filepath.Join(dir, "keyring-probe.Caddyfile")
	text := fmt.Sprintf("{\n\tcoral {\n\t\tlisten 198.18.0.1:4000\n\t\tkey %s %s\n\t}\n}\n", filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key"))
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		return err.Error()
	}
	out, err := exec.Command(caddy, "adapt", "--config", f, "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		last := lines[len(lines)-1]
		var entry struct{ Msg string }
		if json.Unmarshal([]byte(last), &entry) == nil && entry.Msg != "" {
			last = entry.Msg
		}
		if i := strings.Index(last, ", at /"); i > 0 {
			last = last[:i] // the probe file's path says nothing
		}
		return "caddy adapt: " + last
	}
	return ""
}
