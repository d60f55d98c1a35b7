package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// eval/members (issue 35): malicious members of a Coral network, before
// and after its defences.

type membersRow struct {
	Attack        string         `json:"attack"`
	Fraction      float64        `json:"fraction"`
	Attackers     int            `json:"attackers"`
	Mode          string         `json:"mode"`
	Available     float64        `json:"available_gets"`
	Stored        float64        `json:"honest_stores_accepted"`
	Fresh         float64        `json:"fresh_gets"`
	Share         float64        `json:"honest_share_mean"`
	MinShare      float64        `json:"honest_share_min"`
	PerIP         int            `json:"max_contacts_per_ip"`
	Sent          float64        `json:"attack_bytes_sent"`
	Reflected     float64        `json:"bytes_reflected"`
	Amplification float64        `json:"amplification"`
	Replay        int            `json:"max_replay_senders"`
	Peers         int            `json:"max_peer_records"`
	Errors        map[string]int `json:"errors"`
}

type membersReport struct {
	Topology string          `json:"topology"`
	N        int             `json:"n"`
	Keys     int             `json:"keys"`
	Duration string          `json:"attack_duration"`
	Results  []membersRow    `json:"results"`
	Targets  map[string]bool `json:"targets_at_5_percent"`
	PeakRSS  float64         `json:"peak_rss_bytes"`
	Wall     float64         `json:"wall_seconds"`
}

func (r membersReport) row(attack, fraction, mode string) (membersRow, error) {
	f, err := strconv.ParseFloat(fraction, 64)
	if err != nil {
		return membersRow{}, fmt.Errorf("fraction %q", fraction)
	}
	for _, x := range r.Results {
		if x.Attack == attack && x.Mode == mode && x.Fraction == f {
			return x, nil
		}
	}
	return membersRow{}, fmt.Errorf("members.json has no row %s %s %s", attack, fraction, mode)
}

// errorsOf lists a row's errors whose kind starts with prefix, as
// "3 × timeout".
func (x membersRow) errorsOf(prefix string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(x.Errors)) {
		if kind, ok := strings.CutPrefix(k, prefix); ok {
			out = append(out, count(x.Errors[k])+" × "+kind)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func init() {
	// members.table: every attack, share of attackers and mode.
	register("members.table", func(c *results, args []string) (string, error) {
		var r membersReport
		if err := c.load("members.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Results {
			amp := "–"
			if x.Amplification > 0 {
				amp = num(x.Amplification, 2)
			}
			rows = append(rows, []string{x.Attack, pct(x.Fraction, 0) + " (" + count(x.Attackers) + ")", x.Mode,
				pct(x.Available, 1), pct(x.Stored, 1), pct(x.Fresh, 1), pct(x.Share, 1) + " / " + pct(x.MinShare, 1),
				count(x.PerIP), amp, count(x.Replay) + " / " + count(x.Peers)})
		}
		return table([]string{"attack", "attackers", "", "available gets", "honest stores", "fresh gets", "honest share (mean / worst table)",
			"most per IP", "bytes reflected per byte", "replay windows / peer records (max)"}, rows), nil
	})

	// members.targets: issue 35's targets at 5 % after, each met or not.
	register("members.targets", func(c *results, args []string) (string, error) {
		var r membersReport
		if err := c.load("members.json", &r); err != nil {
			return "", err
		}
		var met, missed []string
		for _, k := range slices.Sorted(maps.Keys(r.Targets)) {
			if r.Targets[k] {
				met = append(met, k)
			} else {
				missed = append(missed, k)
			}
		}
		switch {
		case len(r.Targets) == 0:
			return "", fmt.Errorf("members.json lists no targets")
		case len(missed) == 0:
			return fmt.Sprintf("all %s met", count(len(met))), nil
		}
		return fmt.Sprintf("%s of %s met; **missed**: %s", count(len(met)), count(len(r.Targets)), strings.Join(missed, "; ")), nil
	})

	// members.value ATTACK FRACTION MODE FIELD, or members.value FIELD for
	// the run's own.
	register("members.value", func(c *results, args []string) (string, error) {
		var r membersReport
		if err := c.load("members.json", &r); err != nil {
			return "", err
		}
		if len(args) == 1 {
			switch args[0] {
			case "n":
				return count(r.N), nil
			case "keys":
				return count(r.Keys), nil
			case "duration":
				return durString(r.Duration), nil
			case "topology":
				return r.Topology, nil
			case "wall":
				return num(r.Wall/60, 0) + " min", nil
			case "rss":
				return num(r.PeakRSS/(1<<30), 1) + " GiB", nil
			}
			return "", fmt.Errorf("field %q unknown", args[0])
		}
		if err := needArgs(args, 4, "ATTACK FRACTION before|after FIELD"); err != nil {
			return "", err
		}
		x, err := r.row(args[0], args[1], args[2])
		if err != nil {
			return "", err
		}
		switch args[3] {
		case "attackers":
			return count(x.Attackers), nil
		case "fraction":
			return pct(x.Fraction, 0), nil
		case "available":
			return pct(x.Available, 1), nil
		case "stored":
			return pct(x.Stored, 1), nil
		case "fresh":
			return pct(x.Fresh, 1), nil
		case "share":
			return pct(x.Share, 0), nil
		case "worst":
			return pct(x.MinShare, 0), nil
		case "per-ip":
			return count(x.PerIP), nil
		case "amplification":
			return num(x.Amplification, 2), nil
		case "amplification-x":
			return times(x.Amplification, 1), nil
		case "sent":
			return num(x.Sent/1e6, 1) + " MB", nil
		case "reflected":
			return num(x.Reflected/1e6, 1) + " MB", nil
		case "replay":
			return count(x.Replay), nil
		case "peers":
			return count(x.Peers), nil
		case "available-errors":
			return x.errorsOf("get pre: ") + " in " + count(r.Keys) + " gets", nil
		}
		return "", fmt.Errorf("field %q unknown", args[3])
	})
}
