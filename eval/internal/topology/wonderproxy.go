package topology

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EnvDataDir names the environment variable that says where the
// WonderProxy data set is: a directory holding its pings.csv and
// servers.csv. Unset or empty, the default, there is none, and [Load] uses
// the synthetic world. The data set has no licence, so it is never part of
// the repository.
const EnvDataDir = "CORAL_RTT_DATA"

// DataDir returns the directory holding the WonderProxy data set: the value
// of $CORAL_RTT_DATA ([EnvDataDir]), or "" when it is unset or empty (the
// default: no data set). The value is returned as is, without checking it:
// an explicit setting that is wrong should fail loudly in
// [LoadWonderProxy] rather than silently fall back to synthetic data.
func DataDir() string { return os.Getenv(EnvDataDir) }

// Load returns the WonderProxy matrix when [DataDir] names the data set, and
// Synthetic(250, seed) otherwise, so that simulations run everywhere but use
// measured latencies where they can. The seed only affects the synthetic
// fallback; the measured matrix is fixed. Check Matrix.Source to see which
// one you got.
//
// Load panics if the data set named cannot be read: results computed
// on the fallback are not comparable with results on the real data, so a
// broken data directory must not go unnoticed.
func Load(seed uint64) *Matrix {
	return loadFrom(DataDir(), seed)
}

// Topology names for [Named], as experiments' -topology flags take them.
const (
	NameAuto        = "auto"        // Load's choice: the data set if named, else synthetic
	NameSynthetic   = "synthetic"   // Synthetic(250, seed)
	NameWonderProxy = "wonderproxy" // the data set, which must be named
)

// Named returns the topology called name: [NameSynthetic], [NameWonderProxy]
// (an error when [DataDir] is unset or unusable, never a silent fallback),
// or [NameAuto] or "" for [Load]'s choice. Result files name the topology
// they ran on, so a regeneration asks for it by name.
func Named(name string, seed uint64) (*Matrix, error) {
	switch name {
	case "", NameAuto:
		if dir := DataDir(); dir != "" {
			return LoadWonderProxy(dir)
		}
		return Synthetic(250, seed), nil
	case NameSynthetic:
		return Synthetic(250, seed), nil
	case NameWonderProxy, SourceWonderProxy:
		if DataDir() == "" {
			return nil, fmt.Errorf("topology %s: $%s does not name the data set", name, EnvDataDir)
		}
		return LoadWonderProxy(DataDir())
	}
	return nil, fmt.Errorf("unknown topology %q (want %s, %s or %s)", name, NameSynthetic, NameWonderProxy, NameAuto)
}

func loadFrom(dir string, seed uint64) *Matrix {
	if dir == "" {
		return Synthetic(250, seed)
	}
	m, err := LoadWonderProxy(dir)
	if err != nil {
		panic(fmt.Sprintf("topology: RTT data set in $%s unusable (unset it or fix it): %v", EnvDataDir, err))
	}
	return m
}

// wonderProxyContinents maps the data set's continent codes to names. The
// codes are WonderProxy's own: code 3 covers both Europe and Asia (India,
// Japan and Singapore are all 3), so the name says so rather than pretend
// to a finer split the data does not make.
var wonderProxyContinents = map[string]string{
	"1": "North America",
	"2": "South America",
	"3": "Europe/Asia",
	"4": "Oceania",
	"5": "Africa",
}

// LoadWonderProxy reads servers.csv and pings.csv from dir and builds the
// site matrix:
//
//   - Sites are the servers with coordinates, ordered by server id. Servers
//     that appear in the pings but not in servers.csv (ids 292–295), or have
//     no latitude/longitude, are dropped: without coordinates they cannot
//     take part in the distance model, and they are only a handful.
//   - The RTT of a pair is the smallest "min" value over both directions
//     (and over duplicate rows, if any). The minimum is the best estimate of
//     propagation delay: it excludes queueing, and the directions of a pair
//     differ mostly through transient load and, for a few Chinese servers,
//     through very asymmetric routing.
//   - Pairs measured in neither direction, or only with a non-positive
//     value, are filled from great-circle distance by a least-squares line
//     (RTT against distance) fitted to all measured pairs. The fit is stored
//     in Matrix.Model and the number of filled pairs in Matrix.Filled.
//   - The diagonal is 0; the data's self-pings are ignored (a few servers
//     report hundreds of milliseconds to themselves, i.e. they measured a
//     path out of the country and back, not a loopback).
func LoadWonderProxy(dir string) (*Matrix, error) {
	sites, err := readServers(filepath.Join(dir, "servers.csv"))
	if err != nil {
		return nil, err
	}
	if len(sites) < 2 {
		return nil, fmt.Errorf("topology: %s: only %d servers with coordinates", dir, len(sites))
	}
	byID := make(map[int]int, len(sites))
	for i, s := range sites {
		byID[s.ID] = i
	}
	n := len(sites)
	measured := make([]float64, n*n) // ms; NaN = not measured
	for i := range measured {
		measured[i] = math.NaN()
	}
	err = readPings(filepath.Join(dir, "pings.csv"), func(src, dst int, minMs float64) {
		a, okA := byID[src]
		b, okB := byID[dst]
		if !okA || !okB || a == b || !(minMs > 0) {
			return
		}
		// fmin, not min: NaN (unmeasured so far) must lose.
		v := fmin(measured[a*n+b], minMs)
		measured[a*n+b], measured[b*n+a] = v, v
	})
	if err != nil {
		return nil, err
	}

	m := newMatrix(SourceWonderProxy, sites)
	var dist, rtt []float64
	for a := range n {
		for b := a + 1; b < n; b++ {
			if v := measured[a*n+b]; !math.IsNaN(v) {
				dist = append(dist, m.Distance(a, b))
				rtt = append(rtt, v)
			}
		}
	}
	m.Model, err = fitLine(dist, rtt)
	if err != nil {
		return nil, fmt.Errorf("topology: %s: fitting RTT against distance: %w", dir, err)
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			if v := measured[a*n+b]; !math.IsNaN(v) {
				m.set(a, b, max(msToDuration(v), 1)) // sub-nanosecond would round to 0
			} else {
				m.set(a, b, m.Model.Predict(m.Distance(a, b)))
				m.Filled++
			}
		}
	}
	return m, nil
}

// fmin returns the smaller of a and b, treating NaN as missing.
func fmin(a, b float64) float64 {
	if math.IsNaN(a) || b < a {
		return b
	}
	return a
}

// fitLine returns the ordinary least-squares line y = a + b·x and the
// correlation coefficient. It uses centred sums, which stay accurate for
// distances in the thousands of kilometres.
func fitLine(x, y []float64) (DistanceModel, error) {
	if len(x) < 2 {
		return DistanceModel{}, errors.New("fewer than two measured pairs")
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxx, sxy, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return DistanceModel{}, errors.New("all measured pairs are at the same distance")
	}
	slope := sxy / sxx
	r := 0.0
	if syy > 0 {
		r = sxy / math.Sqrt(sxx*syy)
	}
	return DistanceModel{InterceptMs: my - slope*mx, SlopeMsPerKm: slope, Pairs: len(x), R: r}, nil
}

// csvTable is a CSV file whose columns are looked up by header name, so the
// loader does not depend on column order or on the unnamed trailing columns
// servers.csv carries.
type csvTable struct {
	path string
	r    *csv.Reader
	col  map[string]int
}

func openCSV(path string, want ...string) (*csvTable, io.Closer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("topology: %w", err)
	}
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("topology: %s: reading header: %w", path, err)
	}
	t := &csvTable{path: path, r: r, col: make(map[string]int)}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := t.col[h]; !dup && h != "" {
			t.col[h] = i
		}
	}
	for _, w := range want {
		if _, ok := t.col[w]; !ok {
			f.Close()
			return nil, nil, fmt.Errorf("topology: %s: no %q column in header %q", path, w, header)
		}
	}
	return t, f, nil
}

// each calls fn for every data row; get returns a named column's trimmed
// value ("" if the row is short).
func (t *csvTable) each(fn func(get func(col string) string) error) error {
	for {
		rec, err := t.r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("topology: %s: %w", t.path, err)
		}
		get := func(col string) string {
			if i := t.col[col]; i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		if err := fn(get); err != nil {
			line, _ := t.r.FieldPos(0)
			return fmt.Errorf("topology: %s:%d: %w", t.path, line, err)
		}
	}
}

func readServers(path string) ([]Site, error) {
	t, c, err := openCSV(path, "id", "name", "state", "country", "continent", "latitude", "longitude")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var sites []Site
	seen := make(map[int]bool)
	err = t.each(func(get func(string) string) error {
		id, err := strconv.Atoi(get("id"))
		if err != nil {
			return fmt.Errorf("bad server id: %w", err)
		}
		if seen[id] {
			return fmt.Errorf("duplicate server id %d", id)
		}
		seen[id] = true
		latS, lonS := get("latitude"), get("longitude")
		if latS == "" || lonS == "" {
			return nil // no coordinates: dropped, as documented
		}
		lat, err1 := strconv.ParseFloat(latS, 64)
		lon, err2 := strconv.ParseFloat(lonS, 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("server %d: bad coordinates: %w", id, err)
		}
		if !(lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180) {
			return fmt.Errorf("server %d: coordinates (%v, %v) out of range", id, lat, lon)
		}
		code := get("continent")
		continent, ok := wonderProxyContinents[code]
		if !ok {
			continent = "continent " + code
		}
		sites = append(sites, Site{
			ID:        id,
			Name:      get("name"),
			Region:    get("state"),
			Country:   get("country"),
			Continent: continent,
			Lat:       lat,
			Lon:       lon,
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(sites, func(a, b Site) int { return a.ID - b.ID })
	return sites, nil
}

func readPings(path string, fn func(src, dst int, minMs float64)) error {
	t, c, err := openCSV(path, "source", "destination", "min")
	if err != nil {
		return err
	}
	defer c.Close()
	return t.each(func(get func(string) string) error {
		src, err1 := strconv.Atoi(get("source"))
		dst, err2 := strconv.Atoi(get("destination"))
		minMs, err3 := strconv.ParseFloat(get("min"), 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		if math.IsNaN(minMs) || math.IsInf(minMs, 0) {
			return fmt.Errorf("non-finite RTT %v", minMs)
		}
		fn(src, dst, minMs)
		return nil
	})
}
