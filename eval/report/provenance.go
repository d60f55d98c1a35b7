package main

import (
	"fmt"
	"strings"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// fileInfo is what every result file says about its own run: the
// provenance block, or, in files written before there was one, the
// fields the experiments wrote then.
type fileInfo struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	// Files without a provenance block.
	Command  string  `json:"command"`
	Date     string  `json:"date"`
	Topology string  `json:"topology"`
	Wall     float64 `json:"wall_seconds"`
	Caddy    string  `json:"caddy"`
	Host     struct {
		LoadBefore string `json:"loadavg_before"`
	} `json:"host"`
	LoadBefore  string    `json:"loadavg_before"`
	LoadBefore2 string    `json:"load_average_before"`
	LoadSpan    [2]string `json:"loadavg_before_after"` // eval/hostile's
	LoadAvg     string    `json:"loadavg"`              // test/nodelab's

	// MachineBusy and Note are what eval/wan's own provenance block says
	// beyond evalrun.Provenance's fields (wanProvenance).
	MachineBusy float64
	Note        string
}

// wanProvenance is eval/wan's provenance block: evalrun.Provenance's
// commit, start, wall time, loads and topology under the same keys, and
// these under others.
type wanProvenance struct {
	Provenance *struct {
		Experiment  string  `json:"experiment"`
		CleanTree   bool    `json:"clean_tree"`
		Reduced     bool    `json:"reduced"`
		Note        string  `json:"note"`
		CommandLine string  `json:"command_line"`
		BusyCores   float64 `json:"machine_busy_cores"`
	} `json:"provenance"`
}

func (c *results) info(file string) (fileInfo, error) {
	var fi fileInfo
	if err := c.load(file, &fi); err != nil {
		return fi, err
	}
	var w wanProvenance
	if err := c.load(file, &w); err != nil {
		return fi, err
	}
	if p, wp := fi.Provenance, w.Provenance; p != nil && wp != nil && wp.Experiment != "" {
		q := *p // a copy: every load of the file shares the decoded pointer
		q.Program, q.Command, q.Clean = "eval/wan", wp.CommandLine, wp.CleanTree && !wp.Reduced
		if !wp.CleanTree {
			q.Dirty = []string{"not recorded"}
		}
		if wp.Reduced {
			q.Dirty = append(q.Dirty, "a reduced run")
		}
		fi.Provenance, fi.MachineBusy, fi.Note = &q, wp.BusyCores, wp.Note
	}
	return fi, nil
}

// legacyLoad is the load a file without provenance recorded, if any.
func (fi fileInfo) legacyLoad() string {
	for _, s := range []string{fi.Host.LoadBefore, fi.LoadBefore, fi.LoadBefore2, fi.LoadSpan[0], fi.LoadAvg} {
		if s != "" {
			return s
		}
	}
	return ""
}

// wall is the run's wall time in seconds, 0 unknown.
func (fi fileInfo) wall() float64 {
	if fi.Provenance != nil && fi.Provenance.WallSeconds > 0 {
		return fi.Provenance.WallSeconds
	}
	return fi.Wall
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// treeState says whether a run's tree was clean.
func treeState(p *evalrun.Provenance) string {
	switch {
	case p.Commit == "":
		return "commit unknown"
	case p.Clean:
		return "clean tree"
	}
	return "tree with changes (" + strings.Join(p.Dirty, ", ") + ")"
}

func loadSpan(p *evalrun.Provenance) string {
	s := "load average " + firstField(p.LoadBefore)
	if p.LoadAfter != "" {
		s += " → " + firstField(p.LoadAfter)
	}
	if p.OtherCPUs > 0 {
		s += fmt.Sprintf(", other processes kept %s of %d CPUs busy", num(p.OtherCPUs, 2), p.CPUs)
	}
	return s
}

// firstField is the 1-minute load average of a /proc/loadavg triple.
func firstField(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

func init() {
	// provenance FILE: where FILE came from, in a sentence.
	register("provenance", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		fi, err := c.info(args[0])
		if err != nil {
			return "", err
		}
		path := "`docs/eval/" + args[0] + "`"
		p := fi.Provenance
		if p == nil {
			s := path + ": written before result files recorded their provenance (no commit, no tree state); to be regenerated"
			var parts []string
			if fi.Date != "" {
				parts = append(parts, "run "+date(fi.Date))
			}
			if l := fi.legacyLoad(); l != "" {
				parts = append(parts, "load average "+firstField(l))
			}
			if fi.Caddy != "" {
				parts = append(parts, "binary "+strings.Fields(fi.Caddy)[0])
			}
			if len(parts) > 0 {
				s += "; it says: " + strings.Join(parts, ", ")
			}
			return s + ".", nil
		}
		load := loadSpan(p)
		if fi.MachineBusy > 0 {
			load += fmt.Sprintf(", the machine busy %s of its %d CPUs on average (this run's processes included)", num(fi.MachineBusy, 2), p.CPUs)
		}
		s := fmt.Sprintf("%s: commit `%s`, %s; started %s, %s s wall, %s; %s.", path, shortCommit(p.Commit), treeState(p),
			date(p.Started), num(p.WallSeconds, 0), load, p.Topology)
		if fi.Note != "" {
			s += " Its note: " + strings.TrimSuffix(fi.Note, ".") + "."
		}
		return s, nil
	})

	// command FILE: the command that writes FILE, as a code block.
	register("command", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		e, err := experimentFor(args[0])
		if err != nil {
			return "", err
		}
		return "```\n" + e.commandLine() + "\n```", nil
	})

	// commands FILE...: several commands in one code block.
	register("commands", func(c *results, args []string) (string, error) {
		if len(args) == 0 {
			return "", fmt.Errorf("want one or more result files")
		}
		var lines []string
		for _, f := range args {
			e, err := experimentFor(f)
			if err != nil {
				return "", err
			}
			lines = append(lines, e.commandLine())
		}
		return "```\n" + strings.Join(lines, "\n") + "\n```", nil
	})

	// results: every result file and its provenance.
	register("results", func(c *results, args []string) (string, error) {
		var rows [][]string
		for _, e := range experiments {
			fi, err := c.info(e.File)
			if err != nil {
				return "", err
			}
			kind := "real processes"
			if e.Virtual {
				kind = "virtual time"
			}
			p := fi.Provenance
			if p == nil {
				d := "–"
				if fi.Date != "" {
					d = date(fi.Date)
				}
				rows = append(rows, []string{"`" + e.File + "`", kind, "not recorded", "not recorded", d, wallCell(fi.wall()), firstField(fi.legacyLoad()), orDash(fi.Topology)})
				continue
			}
			clean := "yes"
			if !p.Clean {
				clean = "**no**"
			}
			rows = append(rows, []string{"`" + e.File + "`", kind, "`" + shortCommit(p.Commit) + "`", clean, date(p.Started), wallCell(p.WallSeconds),
				firstField(p.LoadBefore) + " → " + firstField(p.LoadAfter), p.Topology})
		}
		return table([]string{"file", "kind", "commit", "clean", "started", "wall", "load average", "topology"}, rows), nil
	})

	// regenerate: what a regeneration runs, what each run needs and how
	// long the last one took.
	register("regenerate", func(c *results, args []string) (string, error) {
		var rows [][]string
		for _, e := range experiments {
			fi, err := c.info(e.File)
			if err != nil {
				return "", err
			}
			needs := e.Needs
			if e.Data {
				needs = strings.TrimPrefix(needs+", CORAL_RTT_DATA", ", ")
			}
			rows = append(rows, []string{"`" + e.File + "`", "`" + e.commandLine() + "`", orDash(needs), wallCell(fi.wall())})
		}
		return table([]string{"file", "command", "needs", "last run's wall time"}, rows), nil
	})
}

func wallCell(s float64) string {
	switch {
	case s <= 0:
		return "–"
	case s < 120:
		return num(s, 0) + " s"
	}
	return num(s/60, 0) + " min"
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
