package main

import (
	"strings"
	"testing"
)

// TestHTTPBenchLarge renders eval/httpbench's large-object section from a
// small file: every target's rounds and median per stream count, every
// ratio with its median, Caddy's memory; and a file written before the
// section existed says so instead of failing.
func TestHTTPBenchLarge(t *testing.T) {
	c := newResults("testdata")
	got, err := c.render(region{Name: "httpbench.large", Args: []string{"httpbench/large.json"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"One object of 256 MiB (`/256m`), runs of 5 s; Caddy's resident memory 65.0 MiB before the section, its peak 74.0 MiB (the `-baseline` Caddy's peak 70.0 MiB).\n",
		"| 1 | coral | 1,310 / 1,250 / 1,381 | **1,310** | 0.70 |\n",
		"| 1 | coral-old | 1,290 / 1,270 / 1,300 | **1,290** | 0.69 |\n",
		"| 4 | file | 800 / 850 / 900 | **850** | 0.81 |\n",
		"| 1 | coral over file | 1.092 / 1.137 / 0.909 | **1.092** |\n",
		"| 1 | new over old | 1.016 / 0.985 / 1.062 | **1.016** |\n",
		"| 4 | coral over file | 1.125 / 1.118 / 1.111 | **1.118** |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	// coral-old ran only with one stream; no row is made up for four.
	if strings.Contains(got, "| 4 | coral-old") || strings.Contains(got, "| 4 | new over old") {
		t.Errorf("a row for a target that did not run:\n%s", got)
	}
	// coral before coral-old before file, as the small objects' tables.
	if i, j := strings.Index(got, "| 1 | coral-old"), strings.Index(got, "| 1 | file"); i < 0 || j < i {
		t.Errorf("rows out of order:\n%s", got)
	}

	got, err = c.render(region{Name: "httpbench.large", Args: []string{"httpbench/small.json"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "`httpbench/small.json` holds no large-object section: it was written before eval/httpbench measured one; to be regenerated.\n"; got != want {
		t.Errorf("without the section: %q, want %q", got, want)
	}
}
