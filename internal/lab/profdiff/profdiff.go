// Package profdiff says where one server's CPU per unit of work (a request,
// a query) goes beyond another's: it reads two CPU profiles of the same
// binary with `go tool pprof`, divides every function's cumulative time by
// the work done while the profile ran, and lists the functions whose cost
// per unit differs most. The experiments (eval/httpbench, eval/dnsperf)
// print it for the target under test against the floor it is measured by.
//
// Cumulative times nest (a caller's includes its callees'), so the rows
// are levels of one call tree rather than parts of a sum; the first rows
// are the widest.
package profdiff

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Profile is one CPU profile's cumulative time per function.
type Profile struct {
	Path     string
	Duration time.Duration            // how long the profile ran
	Total    time.Duration            // CPU time sampled
	Cum      map[string]time.Duration // cumulative CPU time per function
}

// Load reads the profile at path, taken of binary, with `go tool pprof`.
func Load(ctx context.Context, binary, path string) (*Profile, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("profdiff: the go command reads profiles: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-cum",
		"-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", binary, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("profdiff: go tool pprof %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	p, err := Parse(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf("profdiff: %s: %w", path, err)
	}
	p.Path = path
	return p, nil
}

var (
	durationLine = regexp.MustCompile(`^Duration: (\S+), Total samples = (\S+)`)
	// flat flat% sum% cum cum% name (a name may hold spaces: generic
	// instantiations).
	topLine = regexp.MustCompile(`^\s*(\S+)\s+\S+%\s+\S+%\s+(\S+)\s+\S+%\s+(.+)$`)
)

// errNoSamples is the error for output without a Duration line or rows.
var errNoSamples = errors.New("not a pprof -top listing with samples")

// Parse reads the output of `go tool pprof -top -cum`.
func Parse(r io.Reader) (*Profile, error) {
	p := &Profile{Cum: make(map[string]time.Duration)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seenDuration := false
	for sc.Scan() {
		line := sc.Text()
		if m := durationLine.FindStringSubmatch(line); m != nil {
			d, err1 := time.ParseDuration(m[1])
			t, err2 := time.ParseDuration(m[2])
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("duration line %q: %w", line, err)
			}
			p.Duration, p.Total, seenDuration = d, t, true
			continue
		}
		m := topLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cum, err := time.ParseDuration(m[2])
		if err != nil || cum < 0 {
			continue // the header line
		}
		// pprof lists a function's inlined copies apart from its
		// calls; they are the same function, at different call sites.
		p.Cum[strings.TrimSuffix(m[3], " (inline)")] += cum
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seenDuration || len(p.Cum) == 0 || p.Duration <= 0 {
		return nil, errNoSamples
	}
	return p, nil
}

// PerUnit is the CPU time per unit of work of every function in p, for a
// profile taken while the server did rate units per second.
func (p *Profile) PerUnit(rate float64) map[string]time.Duration {
	out := make(map[string]time.Duration, len(p.Cum))
	units := rate * p.Duration.Seconds()
	if units <= 0 {
		return out
	}
	for f, d := range p.Cum {
		out[f] = time.Duration(float64(d) / units)
	}
	out[TotalRow] = time.Duration(float64(p.Total) / units)
	return out
}

// TotalRow is the name of the row with all the CPU time sampled.
const TotalRow = "(all sampled CPU)"

// Row is one function's CPU time per unit of work in two profiles.
type Row struct {
	Func string        `json:"func"`
	A    time.Duration `json:"a_ns"`
	B    time.Duration `json:"b_ns"`
}

// Diff returns the total and then up to n functions whose time per unit
// is larger in a than in b, largest difference first, leaving out those
// that differ by less than atLeast.
func Diff(a, b map[string]time.Duration, n int, atLeast time.Duration) []Row {
	var rows []Row
	for f, da := range a {
		if f == TotalRow {
			continue
		}
		if db := b[f]; da-db >= atLeast {
			rows = append(rows, Row{Func: f, A: da, B: db})
		}
	}
	slices.SortFunc(rows, func(x, y Row) int {
		if c := (y.A - y.B) - (x.A - x.B); c != 0 {
			return int(c)
		}
		return strings.Compare(x.Func, y.Func)
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return append([]Row{{Func: TotalRow, A: a[TotalRow], B: b[TotalRow]}}, rows...)
}

// Print writes rows as a table, times in µs per unit of work; aName and
// bName head the two columns.
func Print(w io.Writer, rows []Row, aName, bName string) {
	fmt.Fprintf(w, "  %9s %9s %9s  %s\n", aName+" µs", bName+" µs", "more µs", "function (cumulative)")
	for _, r := range rows {
		fmt.Fprintf(w, "  %9.2f %9.2f %+9.2f  %s\n", us(r.A), us(r.B), us(r.A-r.B), shorten(r.Func))
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// shorten trims a function name's module path prefix for the table.
func shorten(f string) string {
	for _, prefix := range []string{"github.com/coralcdn/coral/", "github.com/caddyserver/caddy/v2/", "github.com/coredns/coredns/", "github.com/miekg/"} {
		f = strings.Replace(f, prefix, "", 1)
	}
	if len(f) > 100 {
		f = f[:97] + "..."
	}
	return f
}

// Comparison is a Diff of two profiles of one binary with what it
// compares, as the experiments report it.
type Comparison struct {
	Label string `json:"label"` // what was served (an object size, a zone)
	A     string `json:"a"`     // the target under test
	B     string `json:"b"`     // the one it is measured against
	Unit  string `json:"unit"`  // a request, a query
	Rows  []Row  `json:"rows"`  // CPU per unit; the first row is the total
}

// Side is one target's profile and the rate of work while it ran.
type Side struct {
	Name string
	Path string
	Rate float64 // units per second during the profile
}

// Compare loads a's and b's profiles of binary and diffs them per unit of
// work: the n functions that cost a the most more than b.
func Compare(ctx context.Context, binary, label, unit string, a, b Side, n int) (*Comparison, error) {
	pa, err := Load(ctx, binary, a.Path)
	if err != nil {
		return nil, err
	}
	pb, err := Load(ctx, binary, b.Path)
	if err != nil {
		return nil, err
	}
	return &Comparison{Label: label, A: a.Name, B: b.Name, Unit: unit,
		Rows: Diff(pa.PerUnit(a.Rate), pb.PerUnit(b.Rate), n, 50*time.Nanosecond)}, nil
}

// Print writes c under a heading.
func (c *Comparison) Print(w io.Writer) {
	fmt.Fprintf(w, "Where %s's CPU per %s goes beyond %s's (%s; CPU profiles, cumulative time per function):\n", c.A, c.Unit, c.B, c.Label)
	Print(w, c.Rows, c.A, c.B)
}
