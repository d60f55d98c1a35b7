package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// A node keeps its contacts across restarts, as a Kademlia node keeps its
// saved contacts: when an instance stops (a restart in place, the last
// Release) it hands the contacts of its routing tables to the next run on
// its address, and, with Options.StateDir, writes them to a file there
// (also every saveEvery while it runs, for a process that is killed). The
// next run pings them at start (Bootstrap through them and the bootstrap
// list): those that answer prove their address and are back in its tables
// within a round trip, so a restarted node knows its cluster at once, and
// a node without bootstrap addresses (the first of a network) rejoins
// through them instead of waiting for somebody to find it. Instance.Warm
// says when that first round is over.

// Limits of the saved contacts.
const (
	maxSaved    = 256                // contacts saved, most recently heard first
	savedMaxAge = 7 * 24 * time.Hour // older contacts are not loaded
	saveEvery   = time.Minute        // while running, with a state directory
	warmTimeout = 3 * time.Second    // the first round of pings at start
)

// savedContact is one contact in the file.
type savedContact struct {
	Addr      netip.AddrPort    `json:"addr"`
	Services  coraldht.Services `json:"services"`
	LastHeard time.Time         `json:"last_heard"`
}

type contactsFile struct {
	Version  int            `json:"version"`
	Listen   netip.AddrPort `json:"listen"`
	Saved    time.Time      `json:"saved"`
	Contacts []savedContact `json:"contacts"`
}

// contactsPath is the file of the node on listen in dir.
func contactsPath(dir string, listen netip.AddrPort) string {
	name := strings.NewReplacer(":", "_", "[", "", "]", "").Replace(listen.Addr().String())
	return filepath.Join(dir, fmt.Sprintf("contacts-%s-%d.json", name, listen.Port()))
}

// snapshotContacts lists the contacts of n's routing tables, most
// recently heard first, at most maxSaved.
func snapshotContacts(n *coraldht.Node) []savedContact {
	seen := map[netip.AddrPort]int{}
	var out []savedContact
	for _, li := range n.Levels() {
		for _, ni := range n.RoutingTable(li.Level) {
			if ni.Self {
				continue
			}
			if i, ok := seen[ni.Addr]; ok {
				if ni.LastHeard.After(out[i].LastHeard) {
					out[i].LastHeard = ni.LastHeard
				}
				continue
			}
			seen[ni.Addr] = len(out)
			out = append(out, savedContact{Addr: ni.Addr, Services: ni.Services, LastHeard: ni.LastHeard})
		}
	}
	slices.SortStableFunc(out, func(a, b savedContact) int { return b.LastHeard.Compare(a.LastHeard) })
	return out[:min(len(out), maxSaved)]
}

// saveContacts writes cs for the node on listen into dir, atomically.
func saveContacts(dir string, listen netip.AddrPort, cs []savedContact) error {
	b, err := json.MarshalIndent(contactsFile{Version: 1, Listen: listen, Saved: time.Now().UTC(), Contacts: cs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	path := contactsPath(dir, listen)
	tmp, err := os.CreateTemp(dir, ".contacts-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// loadContacts reads the saved contacts of the node on listen in dir:
// none when there is no file; an error for a file that is not ours to
// read. Contacts heard longer ago than savedMaxAge, or at invalid
// addresses, are left out.
func loadContacts(dir string, listen netip.AddrPort, now time.Time) ([]savedContact, error) {
	b, err := os.ReadFile(contactsPath(dir, listen))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f contactsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", contactsPath(dir, listen), err)
	}
	if f.Version != 1 || f.Listen != listen {
		return nil, fmt.Errorf("%s: version %d for %v, not this node's", contactsPath(dir, listen), f.Version, f.Listen)
	}
	var out []savedContact
	for _, c := range f.Contacts {
		if c.Addr.IsValid() && c.Addr.Port() != 0 && !c.Addr.Addr().IsUnspecified() && c.Addr != listen && now.Sub(c.LastHeard) <= savedMaxAge {
			out = append(out, c)
		}
	}
	return out[:min(len(out), maxSaved)], nil
}

// rejoinAddrs is where a restarted node bootstraps first: its bootstrap
// list, then its saved contacts, each once.
func rejoinAddrs(boot []netip.AddrPort, saved []savedContact) []netip.AddrPort {
	out := slices.Clone(boot)
	for _, c := range saved {
		if !slices.Contains(out, c.Addr) {
			out = append(out, c.Addr)
		}
	}
	return out
}
