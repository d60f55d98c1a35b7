//go:build linux

package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// world is the part of the topology a run emulates: which sites of the
// matrix it takes and what each is for.
type world struct {
	M *topology.Matrix `json:"-"`
	// Sites are the matrix's indexes of the lab's sites, in the lab's
	// order: node sites first (groups of GroupSize, one metro each), then
	// the client-only sites, the origin's and the DNS root's.
	Sites       []int `json:"matrix_sites"`
	NodeSites   []int `json:"node_sites"` // lab indexes
	ClientSites []int `json:"client_only_sites"`
	OriginSite  int   `json:"origin_site"`
	DNSSite     int   `json:"dns_site"`
	GroupSize   int   `json:"group_size"`
}

// worldShape is how many of each kind of site a run wants.
type worldShape struct {
	Groups    int // metros with nodes
	GroupSize int // node sites per metro
	// ClientOnly: sites with clients and no node: the first in a metro
	// with nodes (its clients' nearest proxies are 20 ms off), the rest
	// away from every node site.
	ClientOnly int
}

// within is the RTT under which two sites count as one metro.
const within = 20 * time.Millisecond

// pickWorld chooses the sites: metros of GroupSize sites all within 20 ms
// of each other, every other metro chosen near the one before (under 60
// ms apart: one level-1 cluster, two level-2 ones) or far from all
// (over 100 ms), alternating; client-only sites; the origin on the site
// farthest from every node site (its mean RTT to them largest), the DNS
// root and TLD on the nearest (the real ones are anycast, near
// everyone). The choice is a pure function of the matrix and the seed.
func pickWorld(m *topology.Matrix, shape worldShape, seed uint64) (*world, error) {
	rng := rand.New(rand.NewPCG(seed, 0x776f726c64)) // "world"
	taken := map[int]bool{}
	metro := func(anchor int) []int {
		out := []int{anchor}
		var near []int
		for b := range m.Len() {
			if b != anchor && !taken[b] && m.RTT(anchor, b) < within {
				near = append(near, b)
			}
		}
		slices.SortFunc(near, func(x, y int) int { return cmp.Compare(m.RTT(anchor, x), m.RTT(anchor, y)) })
		for _, b := range near {
			if len(out) == shape.GroupSize {
				break
			}
			ok := true
			for _, a := range out {
				ok = ok && m.RTT(a, b) < within
			}
			if ok {
				out = append(out, b)
			}
		}
		return out
	}
	w := &world{M: m, GroupSize: shape.GroupSize}
	var anchors []int
	for g := range shape.Groups {
		var cands []int
		for a := range m.Len() {
			if taken[a] {
				continue
			}
			ok := true
			for i, b := range anchors {
				r := m.RTT(a, b)
				switch {
				case g%2 == 1 && i == len(anchors)-1:
					ok = ok && r >= 30*time.Millisecond && r < 55*time.Millisecond
				case g%2 == 1:
					ok = ok && r >= 30*time.Millisecond
				default:
					ok = ok && r > 100*time.Millisecond
				}
			}
			if ok && len(metro(a)) == shape.GroupSize {
				cands = append(cands, a)
			}
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("wan: no metro of %d sites for group %d in %s", shape.GroupSize, g, m.Source)
		}
		a := cands[rng.IntN(len(cands))]
		anchors = append(anchors, a)
		for _, s := range metro(a) {
			taken[s] = true
			w.Sites = append(w.Sites, s)
		}
	}
	for i := range len(w.Sites) {
		w.NodeSites = append(w.NodeSites, i)
	}
	// Client-only sites: one in the first metro, the others far from
	// every node site.
	nearest := func(s int) time.Duration {
		best := time.Hour
		for _, n := range w.Sites[:len(w.NodeSites)] {
			best = min(best, m.RTT(s, n))
		}
		return best
	}
	for c := range shape.ClientOnly {
		var pick int = -1
		for b := range m.Len() {
			if taken[b] {
				continue
			}
			if c == 0 && m.RTT(anchors[0], b) < within {
				if pick < 0 || m.RTT(anchors[0], b) < m.RTT(anchors[0], pick) {
					pick = b
				}
			}
			if c > 0 && nearest(b) > 60*time.Millisecond && (pick < 0 || rng.IntN(4) == 0) {
				pick = b
			}
		}
		if pick < 0 {
			return nil, fmt.Errorf("wan: no client-only site %d", c)
		}
		taken[pick] = true
		w.ClientSites = append(w.ClientSites, len(w.Sites))
		w.Sites = append(w.Sites, pick)
	}
	// The origin and the DNS root: the free sites with the largest mean
	// RTT to the node sites.
	mean := func(s int) time.Duration {
		var sum time.Duration
		for _, n := range w.Sites[:len(w.NodeSites)] {
			sum += m.RTT(s, n)
		}
		return sum / time.Duration(len(w.NodeSites))
	}
	var free []int
	for b := range m.Len() {
		if !taken[b] {
			free = append(free, b)
		}
	}
	slices.SortFunc(free, func(x, y int) int { return cmp.Compare(mean(y), mean(x)) })
	if len(free) < 2 {
		return nil, fmt.Errorf("wan: no site left for the origin and the root")
	}
	w.OriginSite = len(w.Sites)
	w.Sites = append(w.Sites, free[0])
	w.DNSSite = len(w.Sites)
	w.Sites = append(w.Sites, free[len(free)-1])
	return w, nil
}

// RTT is the matrix RTT between two of the lab's sites.
func (w *world) RTT(a, b int) time.Duration { return w.M.RTT(w.Sites[a], w.Sites[b]) }

// region is a site's region router key, as eval/endtoend's world has it:
// a state or province of one country, or a region of the synthetic world.
func (w *world) region(s int) string {
	site := w.M.Sites[w.Sites[s]]
	return site.Country + "/" + site.Region
}

// name is a site's name in reports.
func (w *world) name(s int) string { return w.M.Sites[w.Sites[s]].Name }

// continentCodes are WonderProxy's continent codes, for writing a
// matrix in its format; Europe/Asia share code 3 there.
var continentCodes = map[string]string{
	"North America": "1", "South America": "2", "Europe/Asia": "3", "Europe": "3", "Asia": "3",
	"Oceania": "4", "Africa": "5",
}

// writeMatrix writes the node sites (and only them) of the world as a
// WonderProxy-format data set (servers.csv, pings.csv) in dir: with
// CORAL_RTT_DATA naming it, eval/clusters and eval/endtoend run on
// exactly the lab's node sites and RTTs in virtual time. Site IDs are the
// lab's indexes, so both orders agree.
func (w *world) writeMatrix(dir string, sites []int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var srv, pings strings.Builder
	srv.WriteString("id,name,title,location,state,country,state_abbv,continent,latitude,longitude\n")
	pings.WriteString("source,destination,min,avg,max,mdev\n")
	for _, s := range sites {
		site := w.M.Sites[w.Sites[s]]
		code := continentCodes[site.Continent]
		if code == "" {
			code = "6"
		}
		fmt.Fprintf(&srv, "%d,%s,%s,%s,%s,%s,,%s,%.6f,%.6f\n", s, csvSafe(site.Name), csvSafe(site.Name), csvSafe(site.Name),
			csvSafe(site.Region), csvSafe(site.Country), code, site.Lat, site.Lon)
		for _, t := range sites {
			if t != s {
				ms := float64(w.RTT(s, t)) / float64(time.Millisecond)
				fmt.Fprintf(&pings, "%d,%d,%.6f,%.6f,%.6f,0\n", s, t, ms, ms, ms)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "servers.csv"), []byte(srv.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pings.csv"), []byte(pings.String()), 0o644)
}

func csvSafe(s string) string { return strings.NewReplacer(",", " ", "\"", "").Replace(s) }
