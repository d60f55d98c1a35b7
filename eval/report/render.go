package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// renderer writes one region from the results: args are the words after
// its name in the opening marker.
type renderer func(c *results, args []string) (string, error)

// renderers by name; every section file adds its own in an init func.
var renderers = map[string]renderer{}

func register(name string, r renderer) {
	if _, dup := renderers[name]; dup {
		panic("report: renderer " + name + " registered twice")
	}
	renderers[name] = r
}

// results reads the committed result files, each once, and decodes each
// into each type once: renderers only read what they are given.
type results struct {
	dir     string // docs/eval
	decoded map[decodedKey]reflect.Value
}

type decodedKey struct {
	name string
	typ  reflect.Type
}

func newResults(dir string) *results {
	return &results{dir: dir, decoded: map[decodedKey]reflect.Value{}}
}

// load decodes result file name (relative to the results directory) into
// v, a pointer.
func (c *results) load(name string, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("load %s: want a non-nil pointer, have %T", name, v)
	}
	k := decodedKey{name, rv.Type()}
	if d, ok := c.decoded[k]; ok {
		rv.Elem().Set(d.Elem())
		return nil
	}
	b, err := os.ReadFile(filepath.Join(c.dir, filepath.FromSlash(name)))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d := reflect.New(rv.Type().Elem())
	d.Elem().Set(rv.Elem())
	c.decoded[k] = d
	return nil
}

// render renders region r. A result file that lacks what a renderer
// reads is an error naming the region, not a crash.
func (c *results) render(r region) (text string, err error) {
	f, ok := renderers[r.Name]
	if !ok {
		return "", fmt.Errorf("no renderer %q (eval/report registers %s)", r.Name, strings.Join(rendererNames(), ", "))
	}
	defer func() {
		if p := recover(); p != nil {
			text, err = "", fmt.Errorf("the result files lack what %s reads: %v", r.Name, p)
		}
	}()
	return f(c, r.Args)
}

func rendererNames() []string {
	var out []string
	for n := range renderers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// needArgs checks a renderer's argument count.
func needArgs(args []string, n int, usage string) error {
	if len(args) != n {
		return fmt.Errorf("want %d argument(s): %s; have %q", n, usage, args)
	}
	return nil
}

// Formatting. Every figure the documents show passes through these, so
// that one number always reads the same way.

// num formats v with d decimals and thousands separated by commas.
func num(v float64, d int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatFloat(math.Abs(v), 'f', d, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	if len(intPart) > 3 { // 1,234 and 12,345
		var b strings.Builder
		for i, ch := range intPart {
			if i > 0 && (len(intPart)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(ch)
		}
		intPart = b.String()
	}
	if v < 0 && strings.Trim(s, "0.") != "" {
		intPart = "−" + intPart
	}
	if frac != "" {
		return intPart + "." + frac
	}
	return intPart
}

// count formats an integer.
func count[T ~int | ~int64 | ~uint64](v T) string { return num(float64(v), 0) }

// pct formats a share (0..1) as a percentage with d decimals.
func pct(share float64, d int) string { return num(100*share, d) + " %" }

// times formats a ratio as "14.4×".
func times(v float64, d int) string { return num(v, d) + "×" }

// secs formats seconds with three decimals.
func secs(v float64) string { return num(v, 3) }

// ms formats milliseconds with about three significant digits.
func ms(v float64) string {
	switch {
	case v >= 100:
		return num(v, 0)
	case v >= 10:
		return num(v, 1)
	case v >= 1:
		return num(v, 2)
	}
	return num(v, 3)
}

// table writes a Markdown table.
func table(head []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(head)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// date formats an RFC 3339 time as "2026-11-29 07:35 UTC".
func date(s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04 MST")
}

// dur formats a duration in one unit: "30 min", "180 s", "500 ms".
func dur(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return num(d.Hours(), 0) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return num(d.Minutes(), 0) + " min"
	case d >= time.Second && d%time.Second == 0:
		return num(d.Seconds(), 0) + " s"
	case d >= time.Second:
		return num(d.Seconds(), 1) + " s"
	}
	return num(float64(d)/float64(time.Millisecond), 0) + " ms"
}
