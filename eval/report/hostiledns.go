package main

import (
	"fmt"
	"strings"
	"time"
)

// eval/hostile's DNS classes (issue 34): bin/coredns under forged sources
// and forged probe replies, in hostile-dns.json.

type hostileDNSReport struct {
	Classes []struct {
		Name string `json:"name"`
		Doc  string `json:"doc"`
	} `json:"classes"`
	Results []struct {
		Class       string        `json:"class"`
		Duration    time.Duration `json:"duration_ns"`
		Forged      int           `json:"forged"`
		ForgedBytes float64       `json:"forged_bytes"`
		Sink        struct {
			Echo       int     `json:"echo_requests"`
			SYN        int     `json:"tcp_syns"`
			UDPBytes   float64 `json:"udp_bytes"`
			Fresh      int     `json:"probes_to_fresh_sources"`
			MostPerPfx int     `json:"most_probes_per_familiar_prefix"`
			Prefixes   int     `json:"prefixes_probed"`
		} `json:"sink"`
		Bound        int     `json:"probe_bound_per_prefix"`
		Denied       float64 `json:"denied_while_fresh"`
		SilentLevels []int   `json:"silent_levels"`
		ControlLevel int     `json:"control_level"`
		Canary       struct {
			Queries, Answered, Mapped, Denied int
		}
		Violations []string `json:"violations"`
	} `json:"dns_results"`
}

func (c *results) hostileDNS() (hostileDNSReport, error) {
	var r hostileDNSReport
	err := c.load("hostile-dns.json", &r)
	return r, err
}

func init() {
	// hostiledns.table: one row per DNS class.
	register("hostiledns.table", func(c *results, args []string) (string, error) {
		r, err := c.hostileDNS()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Results {
			forged := count(x.Forged) + " queries"
			fresh, denied, most, octets, levels := count(x.Sink.Fresh), num(x.Denied, 0), count(x.Sink.MostPerPfx)+" ("+count(x.Bound)+")", "–", "–"
			if x.ForgedBytes > 0 {
				octets = num(x.Sink.UDPBytes/x.ForgedBytes, 2)
			}
			if x.SilentLevels != nil {
				forged = count(x.Forged) + " echo replies"
				fresh, denied, most, octets = "–", "–", "–", "–"
				var l []string
				for _, v := range x.SilentLevels {
					l = append(l, count(v))
				}
				levels = strings.Join(l, ", ") + " (the control: " + count(x.ControlLevel) + ")"
			}
			verdict := "ok"
			if len(x.Violations) > 0 {
				verdict = "**broken**: " + strings.Join(x.Violations, "; ")
			}
			rows = append(rows, []string{x.Class, forged, fresh, denied, most, octets, levels,
				fmt.Sprintf("%d/%d, %d/%d", x.Canary.Answered, x.Canary.Queries, x.Canary.Mapped, x.Canary.Queries), verdict})
		}
		return table([]string{"class", "forged datagrams", "probes to sources used once", "answers denied a mapping meanwhile",
			"most probes to one familiar /24 (bound)", "UDP octets to the forged sources per forged octet", "silent resolvers' levels",
			"canary: answered, mapped", "verdict"}, rows), nil
	})

	// hostiledns.doc CLASS: what the class does, as the file says.
	register("hostiledns.doc", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "CLASS"); err != nil {
			return "", err
		}
		r, err := c.hostileDNS()
		if err != nil {
			return "", err
		}
		for _, x := range r.Classes {
			if x.Name == args[0] {
				return x.Doc, nil
			}
		}
		return "", fmt.Errorf("hostile-dns.json has no class %q", args[0])
	})

	// hostiledns.value FIELD: dns-forged-flood's figures for the prose.
	register("hostiledns.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "duration|prefixes|syn-per-prefix|echo-per-prefix|bound|octets"); err != nil {
			return "", err
		}
		r, err := c.hostileDNS()
		if err != nil {
			return "", err
		}
		for _, x := range r.Results {
			if x.Class != "dns-forged-flood" {
				continue
			}
			per := func(n int) string {
				if x.Sink.Prefixes == 0 {
					return "–"
				}
				return num(float64(n)/float64(x.Sink.Prefixes), 0)
			}
			switch args[0] {
			case "duration":
				return dur(x.Duration), nil
			case "prefixes":
				return count(x.Sink.Prefixes), nil
			case "syn-per-prefix":
				return per(x.Sink.SYN), nil
			case "echo-per-prefix":
				return per(x.Sink.Echo), nil
			case "bound":
				return count(x.Bound), nil
			case "octets":
				return times(x.Sink.UDPBytes/x.ForgedBytes, 2), nil
			}
			return "", fmt.Errorf("field %q unknown", args[0])
		}
		return "", fmt.Errorf("hostile-dns.json has no dns-forged-flood result")
	})
}
