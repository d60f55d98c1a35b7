package topology

import (
	"bufio"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkMatrix verifies the invariants every Matrix must satisfy: indices
// consistent, symmetric, zero diagonal, strictly positive elsewhere.
func checkMatrix(t *testing.T, m *Matrix) {
	t.Helper()
	if m.Len() != len(m.Sites) {
		t.Fatalf("Len() = %d, len(Sites) = %d", m.Len(), len(m.Sites))
	}
	for i, s := range m.Sites {
		if s.Index != i {
			t.Fatalf("Sites[%d].Index = %d", i, s.Index)
		}
		if s.Lat < -90 || s.Lat > 90 || s.Lon < -180 || s.Lon > 180 {
			t.Errorf("site %d (%s) has coordinates (%v, %v)", i, s.Name, s.Lat, s.Lon)
		}
	}
	for a := range m.Len() {
		if d := m.RTT(a, a); d != 0 {
			t.Errorf("RTT(%d, %d) = %v, want 0", a, a, d)
		}
		for b := a + 1; b < m.Len(); b++ {
			ab, ba := m.RTT(a, b), m.RTT(b, a)
			if ab != ba {
				t.Fatalf("asymmetric: RTT(%d, %d) = %v, RTT(%d, %d) = %v", a, b, ab, b, a, ba)
			}
			if ab <= 0 {
				t.Fatalf("RTT(%d, %d) = %v, want > 0", a, b, ab)
			}
		}
	}
}

// near reports whether got is within tol of want.
func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// realMatrix loads the WonderProxy data or skips the test when it is not
// available (it is never part of the repository).
func realMatrix(t *testing.T) *Matrix {
	t.Helper()
	dir := DataDir()
	if dir == "" {
		t.Skip("no WonderProxy data set: set " + EnvDataDir + " to its directory (pings.csv, servers.csv)")
	}
	m, err := LoadWonderProxy(dir)
	if err != nil {
		t.Fatalf("LoadWonderProxy(%s): %v", dir, err)
	}
	return m
}

func TestWonderProxyMatrix(t *testing.T) {
	m := realMatrix(t)
	checkMatrix(t, m)
	if m.Source != SourceWonderProxy {
		t.Errorf("Source = %q", m.Source)
	}
	// 250 server ids appear in the pings; 292–295 have no entry in
	// servers.csv and must be dropped.
	if n := m.Len(); n < 240 || n > 250 {
		t.Errorf("%d sites, want about 245", n)
	}
	ids := map[int]bool{}
	for i, s := range m.Sites {
		ids[s.ID] = true
		if i > 0 && s.ID <= m.Sites[i-1].ID {
			t.Errorf("sites not ordered by id: %d after %d", s.ID, m.Sites[i-1].ID)
		}
		if s.Name == "" || s.Country == "" || s.Continent == "" {
			t.Errorf("site %d: incomplete %+v", i, s)
		}
	}
	for id := 292; id <= 295; id++ {
		if ids[id] {
			t.Errorf("server %d has no coordinates but was kept", id)
		}
	}
	if m.Filled != 28 {
		t.Errorf("Filled = %d pairs, README says 28 are missing in both directions", m.Filled)
	}

	// The fitted line must be physically sane: RTT grows with distance, no
	// faster than 3× light in fibre and no slower than light in fibre.
	fit := m.Model
	t.Logf("fit: %v", fit)
	if fit.SlopeMsPerKm < 0.010 || fit.SlopeMsPerKm > 0.030 {
		t.Errorf("slope %.4f ms/km outside [0.010, 0.030]", fit.SlopeMsPerKm)
	}
	if fit.InterceptMs < 0 || fit.InterceptMs > 60 {
		t.Errorf("intercept %.1f ms outside [0, 60]", fit.InterceptMs)
	}
	if fit.R < 0.7 || fit.Pairs < 29000 {
		t.Errorf("fit over %d pairs with r = %.2f; want ≥ 29000 pairs, r ≥ 0.7", fit.Pairs, fit.R)
	}

	// README facts. They appear to have been measured on the "avg" column
	// (which reproduces them to the digit); the "min" column used here
	// gives slightly lower RTTs, hence the tolerances.
	st := m.Stats()
	t.Logf("stats: %v", st)
	checks := []struct {
		name           string
		got, want, tol float64
	}{
		{"median ms", ms(st.Median), 139, 5},
		{"p10 ms", ms(st.P10), 35, 4},
		{"p90 ms", ms(st.P90), 275, 8},
		{"pairs <20ms", st.PairsUnder20ms, 0.039, 0.01},
		{"pairs <60ms", st.PairsUnder60ms, 0.20, 0.02},
		{"sites with neighbour <20ms", st.SitesNeighbour20ms, 0.79, 0.04},
		{"sites with neighbour <60ms", st.SitesNeighbour60ms, 0.98, 0.02},
	}
	for _, c := range checks {
		if !near(c.got, c.want, c.tol) {
			t.Errorf("%s = %.4g, want %.4g ± %.2g", c.name, c.got, c.want, c.tol)
		}
	}
}

// TestWonderProxyAgainstRawPings re-reads pings.csv with an independent,
// deliberately naive parser and checks every entry of the matrix: measured
// pairs hold the smaller "min" of the two directions, unmeasured ones the
// fitted prediction.
func TestWonderProxyAgainstRawPings(t *testing.T) {
	m := realMatrix(t)
	f, err := os.Open(filepath.Join(DataDir(), "pings.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byID := map[int]int{}
	for i, s := range m.Sites {
		byID[s.ID] = i
	}
	type pair struct{ a, b int }
	want := map[pair]float64{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		src, _ := strconv.Atoi(fields[0])
		dst, _ := strconv.Atoi(fields[1])
		v, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		a, okA := byID[src]
		b, okB := byID[dst]
		if !okA || !okB || a == b {
			continue
		}
		p := pair{min(a, b), max(a, b)}
		if old, ok := want[p]; !ok || v < old {
			want[p] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	filled := 0
	for a := range m.Len() {
		for b := a + 1; b < m.Len(); b++ {
			got := m.RTT(a, b)
			if v, ok := want[pair{a, b}]; ok {
				if d := ms(got) - v; math.Abs(d) > 1e-6 {
					t.Fatalf("RTT(%s, %s) = %v, want min of directions %v ms", m.Sites[a].Name, m.Sites[b].Name, got, v)
				}
				continue
			}
			filled++
			if p := m.Model.Predict(m.Distance(a, b)); got != p {
				t.Errorf("missing pair (%s, %s) = %v, want fitted %v", m.Sites[a].Name, m.Sites[b].Name, got, p)
			}
		}
	}
	if filled != m.Filled {
		t.Errorf("%d pairs not in pings.csv, Filled = %d", filled, m.Filled)
	}
}

// writeFiles creates files (name → content) in dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A miniature data set in the real format, exercising every rule of
// LoadWonderProxy, so the loader is tested even without the real data.
const (
	tinyServers = `id,name,title,location,state,country,state_abbv,continent,latitude,longitude,selected,,,11
7,Paris,Paris,Paris,Ile-de-France,France,IDF,3,48.8566,2.3522,1,,,
3,London,London,London,England,United Kingdom,ENG,3,51.5074,-0.1278,,,,
9,NewYork,New York,New York,New York,United States,NY,1,40.7128,-74.0060,1,,,
5,Nowhere,Nowhere,Nowhere,,Atlantis,,9,,,,,,
12,Tokyo,Tokyo,Tokyo,Tokyo,Japan,13,3,35.6762,139.6503,,,,
`
	// London–Paris measured both ways (asymmetric, plus a duplicate row),
	// London–NewYork one way only, Paris–NewYork and NewYork–Tokyo both
	// ways, Tokyo–Paris with a zero (bogus) value, London–Tokyo not at all,
	// rows for ids without coordinates (5) or unknown (99), and a self row
	// with a large value.
	tinyPings = `source,destination,min,avg,max,mdev
3,7,4.5,5,6,0.1
7,3,4.2,5,6,0.1
3,7,4.4,5,6,0.1
3,9,70,71,72,0.5
7,9,75,76,77,0.5
9,7,76,77,78,0.5
9,12,160,161,162,1
12,9,158,161,162,1
12,7,0,1,2,0
5,3,10,11,12,1
99,3,10,11,12,1
9,9,300,301,302,0.1
`
)

func TestLoadWonderProxyRules(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"servers.csv": tinyServers, "pings.csv": tinyPings})
	m, err := LoadWonderProxy(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkMatrix(t, m)
	var names []string
	for _, s := range m.Sites {
		names = append(names, s.Name)
	}
	if want := []string{"London", "Paris", "NewYork", "Tokyo"}; !slices.Equal(names, want) {
		t.Fatalf("sites %v, want %v (by id, Nowhere dropped)", names, want)
	}
	london, paris, newYork, tokyo := 0, 1, 2, 3
	if s := m.Sites[london]; s.ID != 3 || s.Region != "England" || s.Country != "United Kingdom" || s.Continent != "Europe/Asia" {
		t.Errorf("London parsed as %+v", s)
	}
	if c := m.Sites[newYork].Continent; c != "North America" {
		t.Errorf("New York continent %q", c)
	}
	for _, c := range []struct {
		a, b int
		want time.Duration
	}{
		{london, paris, 4200 * time.Microsecond}, // smaller direction, duplicates too
		{london, newYork, 70 * time.Millisecond}, // one direction only
		{paris, newYork, 75 * time.Millisecond},  // smaller direction
		{newYork, tokyo, 158 * time.Millisecond}, // smaller direction
	} {
		if got := m.RTT(c.a, c.b); got != c.want {
			t.Errorf("RTT(%s, %s) = %v, want %v", m.Sites[c.a].Name, m.Sites[c.b].Name, got, c.want)
		}
	}
	// The fit over the four measured pairs, computed independently.
	x := []float64{m.Distance(london, paris), m.Distance(london, newYork), m.Distance(paris, newYork), m.Distance(newYork, tokyo)}
	y := []float64{4.2, 70, 75, 158}
	var mx, my, sxx, sxy float64
	for i := range x {
		mx += x[i] / 4
		my += y[i] / 4
	}
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	slope := sxy / sxx
	if !near(m.Model.SlopeMsPerKm, slope, 1e-9) || !near(m.Model.InterceptMs, my-slope*mx, 1e-6) || m.Model.Pairs != 4 {
		t.Errorf("model %+v, want slope %v intercept %v over 4 pairs", m.Model, slope, my-slope*mx)
	}
	if m.Filled != 2 {
		t.Errorf("Filled = %d, want 2 (London–Tokyo unmeasured, Paris–Tokyo only zero)", m.Filled)
	}
	for _, p := range [][2]int{{london, tokyo}, {paris, tokyo}} {
		want := msToDuration(m.Model.InterceptMs + m.Model.SlopeMsPerKm*m.Distance(p[0], p[1]))
		if got := m.RTT(p[0], p[1]); got != want {
			t.Errorf("filled RTT(%s, %s) = %v, want %v", m.Sites[p[0]].Name, m.Sites[p[1]].Name, got, want)
		}
	}
	// Sanity of the geometry itself: London–Paris is about 344 km.
	if d := m.Distance(london, paris); !near(d, 344, 3) {
		t.Errorf("London–Paris %.1f km, want ≈344", d)
	}
}

func TestLoadWonderProxyErrors(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no files":         {},
		"no pings":         {"servers.csv": tinyServers},
		"missing column":   {"servers.csv": "id,name,latitude\n1,a,2\n", "pings.csv": tinyPings},
		"bad rtt":          {"servers.csv": tinyServers, "pings.csv": "source,destination,min\n3,7,fast\n"},
		"bad latitude":     {"servers.csv": strings.Replace(tinyServers, "48.8566", "north", 1), "pings.csv": tinyPings},
		"duplicate server": {"servers.csv": tinyServers + "3,London2,,,,UK,,3,51,0,,,,\n", "pings.csv": tinyPings},
		"one site":         {"servers.csv": strings.Join(strings.Split(tinyServers, "\n")[:2], "\n") + "\n", "pings.csv": tinyPings},
		"nothing measured": {"servers.csv": tinyServers, "pings.csv": "source,destination,min\n"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, files)
			if m, err := LoadWonderProxy(dir); err == nil {
				t.Errorf("no error; got %d sites", m.Len())
			}
		})
	}
}

func TestDataDir(t *testing.T) {
	t.Setenv(EnvDataDir, "")
	if got := DataDir(); got != "" {
		t.Errorf("without data: DataDir() = %q, want \"\"", got)
	}
	if m := Load(3); m.Source != SourceSynthetic || m.Len() != 250 {
		t.Errorf("Load without data: %s with %d sites, want synthetic with 250", m.Source, m.Len())
	}

	data := filepath.Join(t.TempDir(), "wonderproxy")
	writeFiles(t, data, map[string]string{"servers.csv": tinyServers, "pings.csv": tinyPings})
	t.Setenv(EnvDataDir, data)
	if got := DataDir(); got != data {
		t.Errorf("with $%s: DataDir() = %q, want %q", EnvDataDir, got, data)
	}
	if m := Load(3); m.Source != SourceWonderProxy || m.Len() != 4 {
		t.Errorf("Load with data: %s with %d sites, want the 4-site test set", m.Source, m.Len())
	}

	t.Setenv(EnvDataDir, "/explicit/path")
	if got := DataDir(); got != "/explicit/path" {
		t.Errorf("with $%s: DataDir() = %q", EnvDataDir, got)
	}
	// An explicit but broken setting must not silently fall back.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Load with a bad explicit data directory did not panic")
			}
		}()
		Load(3)
	}()
}

func TestNamed(t *testing.T) {
	t.Setenv(EnvDataDir, "")
	for _, name := range []string{"", NameAuto, NameSynthetic} {
		if m, err := Named(name, 3); err != nil || m.Source != SourceSynthetic {
			t.Errorf("Named(%q) without data: %v, %v", name, m, err)
		}
	}
	if _, err := Named(NameWonderProxy, 3); err == nil {
		t.Error("Named(wonderproxy) without data: no error")
	}
	if _, err := Named("mars", 3); err == nil {
		t.Error("Named(mars): no error")
	}
	data := filepath.Join(t.TempDir(), "wonderproxy")
	writeFiles(t, data, map[string]string{"servers.csv": tinyServers, "pings.csv": tinyPings})
	t.Setenv(EnvDataDir, data)
	for name, want := range map[string]string{NameAuto: SourceWonderProxy, NameWonderProxy: SourceWonderProxy,
		SourceWonderProxy: SourceWonderProxy, NameSynthetic: SourceSynthetic} {
		if m, err := Named(name, 3); err != nil || m.Source != want {
			t.Errorf("Named(%q) with data: %v, %v; want %s", name, m, err, want)
		}
	}
	t.Setenv(EnvDataDir, "/explicit/path")
	if _, err := Named(NameWonderProxy, 3); err == nil {
		t.Error("Named(wonderproxy) with a broken data directory: no error")
	}
}

func TestLoad(t *testing.T) {
	m := Load(1)
	checkMatrix(t, m)
	want := SourceSynthetic
	if DataDir() != "" {
		want = SourceWonderProxy
	}
	if m.Source != want {
		t.Errorf("Load: source %q, want %q", m.Source, want)
	}
	t.Logf("Load(1): %s, %v", m.Source, m.Stats())
}

func TestSyntheticDeterministic(t *testing.T) {
	a, b := Synthetic(120, 42), Synthetic(120, 42)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("Synthetic(120, 42) differs between calls")
	}
	c := Synthetic(120, 43)
	if reflect.DeepEqual(a.rtt, c.rtt) || reflect.DeepEqual(a.Sites, c.Sites) {
		t.Error("seeds 42 and 43 give the same world")
	}
}

func TestSyntheticStructure(t *testing.T) {
	for _, n := range []int{1, 2, 7, 40, 250, 700} {
		m := Synthetic(n, 5)
		checkMatrix(t, m)
		if m.Len() != n || m.Source != SourceSynthetic || m.Filled != 0 {
			t.Errorf("Synthetic(%d): %d sites, source %q, filled %d", n, m.Len(), m.Source, m.Filled)
		}
		names := map[string]bool{}
		for _, s := range m.Sites {
			if names[s.Name] {
				t.Errorf("Synthetic(%d): duplicate site name %q", n, s.Name)
			}
			names[s.Name] = true
			if s.ID != s.Index || s.Region == "" || s.Continent == "" {
				t.Errorf("Synthetic(%d): incomplete site %+v", n, s)
			}
		}
	}
	continents := map[string]int{}
	for _, s := range Synthetic(250, 1).Sites {
		continents[s.Continent]++
	}
	for _, c := range []string{"North America", "South America", "Europe", "Asia", "Oceania", "Africa"} {
		if continents[c] == 0 {
			t.Errorf("Synthetic(250) has no site in %s: %v", c, continents)
		}
	}
	if continents["Europe"] < 70 || continents["North America"] < 60 {
		t.Errorf("Synthetic(250) continent mix %v: want Europe and North America dominant", continents)
	}
}

// TestSyntheticStats checks that the synthetic world has the same kind of
// structure as the measured one, within broad bands around the WonderProxy
// figures, for several seeds.
func TestSyntheticStats(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		st := Synthetic(250, seed).Stats()
		t.Logf("seed %d: %v", seed, st)
		bands := []struct {
			name        string
			got, lo, hi float64
		}{
			{"median ms", ms(st.Median), 80, 200},
			{"p10 ms", ms(st.P10), 15, 60},
			{"p90 ms", ms(st.P90), 200, 350},
			{"pairs <20ms", st.PairsUnder20ms, 0.015, 0.10},
			{"pairs <60ms", st.PairsUnder60ms, 0.10, 0.35},
			{"sites with neighbour <20ms", st.SitesNeighbour20ms, 0.65, 0.95},
			{"sites with neighbour <60ms", st.SitesNeighbour60ms, 0.90, 1},
		}
		for _, b := range bands {
			if b.got < b.lo || b.got > b.hi {
				t.Errorf("seed %d: %s = %.4g, want in [%g, %g]", seed, b.name, b.got, b.lo, b.hi)
			}
		}
	}
}

func TestApportion(t *testing.T) {
	for _, n := range []int{0, 1, 5, 31, 32, 33, 250, 1001} {
		c := apportion(n)
		sum := 0
		for _, k := range c {
			sum += k
		}
		if sum != n {
			t.Errorf("apportion(%d) sums to %d", n, sum)
		}
	}
	// The heaviest region gets the most sites.
	c := apportion(250)
	if slices.Max(c) != c[0] {
		t.Errorf("apportion(250) = %v, want us-east (weight 9) largest", c)
	}
}

func TestStatsTiny(t *testing.T) {
	// Three sites on a line: RTTs 10, 30, 50 ms.
	m := newMatrix("test", make([]Site, 3))
	m.set(0, 1, 10*time.Millisecond)
	m.set(1, 2, 30*time.Millisecond)
	m.set(0, 2, 50*time.Millisecond)
	st := m.Stats()
	want := MatrixStats{
		Sites: 3, Pairs: 3,
		P10: 10 * time.Millisecond, Median: 30 * time.Millisecond, P90: 50 * time.Millisecond,
		PairsUnder20ms: 1.0 / 3, PairsUnder60ms: 1,
		SitesNeighbour20ms: 2.0 / 3, SitesNeighbour60ms: 1,
	}
	if st != want {
		t.Errorf("Stats() = %+v, want %+v", st, want)
	}
	if b, d := m.Nearest(2); b != 1 || d != 30*time.Millisecond {
		t.Errorf("Nearest(2) = %d, %v", b, d)
	}
	if st := newMatrix("test", make([]Site, 1)).Stats(); st.Sites != 1 || st.Pairs != 0 {
		t.Errorf("one-site Stats() = %+v", st)
	}
}

func TestDestinationRoundTrip(t *testing.T) {
	for _, c := range []struct{ lat, lon, bearing, km float64 }{
		{48.85, 2.35, 0, 100}, {-33.9, 151.2, 123, 2500}, {64.1, -21.9, 270, 800}, {10, 179.9, 90, 50},
	} {
		lat, lon := destination(c.lat, c.lon, c.bearing, c.km)
		if d := greatCircleKm(c.lat, c.lon, lat, lon); !near(d, c.km, 1e-6*c.km+1e-9) {
			t.Errorf("destination%v at %.3f km", c, d)
		}
		if lon < -180 || lon >= 180 {
			t.Errorf("destination%v: longitude %v not normalised", c, lon)
		}
	}
}

func sitePrefix(a netip.AddrPort) netip.Prefix {
	p, _ := a.Addr().Prefix(24)
	return p
}

func TestPlaceAddresses(t *testing.T) {
	m := Synthetic(60, 2)
	nodes := m.Place(500, 9, 7)
	if len(nodes) != 500 {
		t.Fatalf("%d nodes", len(nodes))
	}
	seen := map[netip.AddrPort]bool{}
	prefixSite := map[netip.Prefix]int{}
	for _, nd := range nodes {
		if seen[nd.Addr] {
			t.Fatalf("duplicate address %v", nd.Addr)
		}
		seen[nd.Addr] = true
		a := nd.Addr.Addr().As4()
		if !nd.Addr.Addr().Is4() || a[0] != 10 || nd.Addr.Port() != NodePort || a[3] == 0 || a[3] == 255 {
			t.Errorf("address %v outside 10.x.y.1-254:%d", nd.Addr, NodePort)
		}
		if s, ok := prefixSite[sitePrefix(nd.Addr)]; ok && s != nd.Site {
			t.Errorf("%v at site %d shares its /24 with site %d", nd.Addr, nd.Site, s)
		}
		prefixSite[sitePrefix(nd.Addr)] = nd.Site
		if got := int(a[1])<<8 | int(a[2]); got != nd.Site {
			t.Errorf("%v at site %d: /24 encodes site %d", nd.Addr, nd.Site, got)
		}
	}
	if !reflect.DeepEqual(nodes, m.Place(500, 9, 7)) {
		t.Error("Place not deterministic")
	}
	other := m.Place(500, 9, 8)
	if reflect.DeepEqual(nodes, other) {
		t.Error("Place ignores its seed")
	}
}

// siteCounts returns the node count per site in order of first appearance,
// checking that each site's nodes are consecutive.
func siteCounts(t *testing.T, nodes []Node) []int {
	t.Helper()
	var counts []int
	done := map[int]bool{}
	for i, nd := range nodes {
		if i > 0 && nd.Site == nodes[i-1].Site {
			counts[len(counts)-1]++
			continue
		}
		if done[nd.Site] {
			t.Fatalf("site %d's nodes are not consecutive", nd.Site)
		}
		done[nd.Site] = true
		counts = append(counts, 1)
	}
	return counts
}

func TestPlaceDistribution(t *testing.T) {
	m := Synthetic(50, 3)
	for _, c := range []struct {
		n, perSite int
		want       []int
	}{
		{10, 4, []int{4, 4, 2}},
		{12, 4, []int{4, 4, 4}},
		{3, 5, []int{3}},
		{0, 5, nil},
		{200, 4, slices.Repeat([]int{4}, 50)},
		{120, 2, slices.Repeat([]int{3}, 40)},            // raised to ceil(120/50) = 3
		{101, 0, append(slices.Repeat([]int{3}, 33), 2)}, // perSite 0: ceil(101/50) = 3
		{50, 1, slices.Repeat([]int{1}, 50)},
		{3, 0, []int{1, 1, 1}}, // perSite 0 with room to spare: one per site
		{3, -2, []int{1, 1, 1}},
	} {
		got := siteCounts(t, m.Place(c.n, c.perSite, 1))
		if !slices.Equal(got, c.want) {
			t.Errorf("Place(%d, %d): per-site counts %v, want %v", c.n, c.perSite, got, c.want)
		}
	}
	// The visiting order is a seeded permutation: 50 sites × 1 node covers
	// every site exactly once, in an order that depends on the seed.
	a, b := m.Place(50, 1, 1), m.Place(50, 1, 2)
	var sa, sb []int
	for i := range a {
		sa, sb = append(sa, a[i].Site), append(sb, b[i].Site)
	}
	if slices.Equal(sa, sb) {
		t.Error("site order independent of seed")
	}
	slices.Sort(sa)
	for i, s := range sa {
		if s != i {
			t.Fatalf("sites visited %v, want a permutation", sa)
		}
	}
}

func TestPlacePanics(t *testing.T) {
	m := Synthetic(2, 1)
	for name, f := range map[string]func(){
		"negative":      func() { m.Place(-1, 1, 1) },
		"too many":      func() { m.Place(2*MaxPerSite+1, 1, 1) },
		"empty matrix":  func() { newMatrix("x", nil).Place(1, 1, 1) },
		"duplicate":     func() { n := m.Place(2, 2, 1); Latency(m, []Node{n[0], n[0]}) },
		"site range":    func() { Latency(m, []Node{{Addr: netip.MustParseAddrPort("10.9.9.9:1"), Site: 5}}) },
		"rtt range":     func() { m.RTT(0, 2) },
		"synthetic < 1": func() { Synthetic(0, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
	// The largest placement that fits does not panic.
	if got := len(m.Place(2*MaxPerSite, 1, 1)); got != 2*MaxPerSite {
		t.Errorf("Place(%d) gave %d nodes", 2*MaxPerSite, got)
	}
}

func TestIntraSiteRTT(t *testing.T) {
	m := Synthetic(4, 1)
	nodes := m.Place(4*200, 200, 9)
	var rtts []time.Duration
	for i := range nodes {
		for j := i + 1; j < len(nodes); j++ {
			if nodes[i].Site != nodes[j].Site {
				continue
			}
			r := m.NodeRTT(nodes[i], nodes[j])
			if r != m.NodeRTT(nodes[j], nodes[i]) {
				t.Fatalf("intra-site RTT asymmetric for %v, %v", nodes[i].Addr, nodes[j].Addr)
			}
			if r < IntraSiteMinRTT || r > IntraSiteMaxRTT {
				t.Fatalf("intra-site RTT %v outside [%v, %v]", r, IntraSiteMinRTT, IntraSiteMaxRTT)
			}
			rtts = append(rtts, r)
		}
	}
	// Uniformity: 4 sites × C(200, 2) = 79,600 pairs; each decile of
	// [0.5, 5] ms must hold 10 % ± 1 % of them. A sum of two per-node
	// delays (triangular) would put only 2 % in the first decile.
	var bins [10]int
	for _, r := range rtts {
		bins[min(int(10*float64(r-IntraSiteMinRTT)/float64(IntraSiteMaxRTT-IntraSiteMinRTT)), 9)]++
	}
	for i, c := range bins {
		if f := float64(c) / float64(len(rtts)); !near(f, 0.1, 0.01) {
			t.Errorf("decile %d holds %.3f of intra-site RTTs, want 0.1: %v", i, f, bins)
		}
	}
	if m.NodeRTT(nodes[0], nodes[0]) != 0 {
		t.Error("NodeRTT of a node to itself is not 0")
	}
}

func TestLatency(t *testing.T) {
	m := Synthetic(40, 4)
	nodes := m.Place(150, 5, 11)
	lat := Latency(m, nodes)
	for i, a := range nodes {
		for j, b := range nodes {
			got := lat(a.Addr, b.Addr)
			if got != lat(b.Addr, a.Addr) {
				t.Fatalf("latency %v→%v asymmetric", a.Addr, b.Addr)
			}
			var want time.Duration
			switch {
			case i == j:
				want = 0
			case a.Site == b.Site:
				want = IntraSiteRTT(a.Key, b.Key) / 2
				if got < IntraSiteMinRTT/2 || got > IntraSiteMaxRTT/2 {
					t.Errorf("same-site one-way delay %v outside [0.25, 2.5] ms", got)
				}
			default:
				want = m.RTT(a.Site, b.Site) / 2
			}
			if got != want {
				t.Fatalf("latency %v→%v = %v, want %v", a.Addr, b.Addr, got, want)
			}
			if rtt := m.NodeRTT(a, b); rtt-2*got < 0 || rtt-2*got > 1 {
				t.Fatalf("latency %v→%v = %v is not half of NodeRTT %v", a.Addr, b.Addr, got, rtt)
			}
		}
	}
	unknown := netip.MustParseAddrPort("192.0.2.1:4000")
	def := m.Stats().Median / 2
	if got := lat(unknown, nodes[0].Addr); got != def {
		t.Errorf("unknown source: %v, want half the median %v", got, def)
	}
	if got := lat(nodes[0].Addr, unknown); got != def {
		t.Errorf("unknown destination: %v, want %v", got, def)
	}
	if got := Latency(Synthetic(1, 1), nil)(unknown, unknown); got != IntraSiteMaxRTT/2 {
		t.Errorf("one-site matrix default %v", got)
	}
	// The function must not depend on the slice after construction.
	last := nodes[len(nodes)-1].Addr
	before := lat(nodes[0].Addr, last)
	nodes[0].Site = (nodes[0].Site + 1) % m.Len()
	nodes[0].Key++
	if got := lat(nodes[0].Addr, last); got != before {
		t.Errorf("latency changed from %v to %v after the caller modified its slice", before, got)
	}
}

func TestLatencyConcurrent(t *testing.T) {
	m := Synthetic(30, 1)
	nodes := m.Place(90, 3, 1)
	lat := Latency(m, nodes)
	// What each goroutine must find: the same pairs, asked one by one
	// before any concurrency (a latency function that caches or computes
	// lazily must give every caller the same answers).
	want := make([]time.Duration, 4)
	for g := range want {
		for i := range nodes {
			want[g] += lat(nodes[(i+g)%len(nodes)].Addr, nodes[i].Addr)
		}
	}
	if want[1] <= 0 {
		t.Fatalf("sum of latencies %v, want positive", want[1])
	}
	lat = Latency(m, nodes) // fresh: its first uses are concurrent
	got := make([]time.Duration, 4)
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 3 {
				var sum time.Duration
				for i := range nodes {
					sum += lat(nodes[(i+g)%len(nodes)].Addr, nodes[i].Addr)
				}
				if got[g] != 0 && sum != got[g] {
					got[g] = -1 // changed between rounds
					return
				}
				got[g] = sum
			}
		}()
	}
	for range 4 {
		<-done
	}
	for g := range got {
		if got[g] != want[g] {
			t.Errorf("goroutine %d: sum of latencies %v, want %v (as asked one by one)", g, got[g], want[g])
		}
	}
}

func BenchmarkLatency(b *testing.B) {
	m := Synthetic(250, 1)
	nodes := m.Place(2000, 8, 1)
	lat := Latency(m, nodes)
	var sum time.Duration
	for i := 0; b.Loop(); i++ {
		sum += lat(nodes[i%len(nodes)].Addr, nodes[(i*7+3)%len(nodes)].Addr)
	}
	_ = sum
}

func BenchmarkLoadWonderProxy(b *testing.B) {
	dir := DataDir()
	if dir == "" {
		b.Skip("no data")
	}
	for b.Loop() {
		if _, err := LoadWonderProxy(dir); err != nil {
			b.Fatal(err)
		}
	}
}
