package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The DNS figures the plugin README quotes from the labs' own tests:
// test/resolverlab's TestProofPerResolver (resolver-proofs.json) and
// test/nodelab's TestRestartAnswersAtOnce (restart.json). They are written
// by go test, not by an eval program (experiments lists them with Test).

func init() {
	// resolverproofs.table: how each resolver's queries proved their
	// source, and what their answers were ranked on.
	register("resolverproofs.table", func(c *results, args []string) (string, error) {
		var r struct {
			Resolvers []struct {
				Resolver  string         `json:"resolver"`
				Mode      string         `json:"mode"`
				Queries   int            `json:"queries"`
				Cookie    int            `json:"cookie_udp"`
				TCP       int            `json:"tcp"`
				Familiar  int            `json:"familiar_udp"`
				Unproven  int            `json:"unproven_udp"`
				Truncated int            `json:"truncated"`
				Proximity map[string]int `json:"proximity"`
			} `json:"resolvers"`
		}
		if err := c.load("resolver-proofs.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Resolvers {
			ranked, mapped := 0, 0
			var other []string
			for _, k := range slices.Sorted(maps.Keys(x.Proximity)) {
				n := x.Proximity[k]
				ranked += n
				switch k {
				case "unproven", "skipped", "limited":
					other = append(other, count(n)+" "+k)
				default:
					mapped += n
				}
			}
			cell := count(mapped) + " of " + count(ranked)
			if len(other) > 0 {
				cell += " (" + strings.Join(other, ", ") + ")"
			}
			rows = append(rows, []string{x.Resolver, x.Mode, count(x.Queries),
				fmt.Sprintf("%s / %s / %s / %s (%s truncated)", count(x.Cookie), count(x.TCP), count(x.Familiar), count(x.Unproven), count(x.Truncated)), cell})
		}
		return table([]string{"resolver", "mode", "queries", "valid cookie (UDP) / TCP / familiar (UDP) / unproven (UDP)", "answers mapped toward it, of those that ranked members"}, rows), nil
	})

	// restart.table: the first A record and /ready after each kind of
	// restart.
	register("restart.table", func(c *results, args []string) (string, error) {
		var r struct {
			CheckMillis float64 `json:"check_interval_ms"`
			Results     []struct {
				Case          string  `json:"case"`
				FirstA        float64 `json:"first_a_ms"`
				Ready         float64 `json:"ready_ms"`
				ReadyWithoutA int     `json:"ready_without_a"`
				Without       int     `json:"answers_without_proxy"`
				Sampled       int     `json:"answers_sampled"`
			} `json:"results"`
		}
		if err := c.load("restart.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Results {
			first := "none within the test's bound"
			if x.FirstA > 0 {
				first = num(x.FirstA, 0) + " ms"
			}
			if x.Sampled > 0 {
				first += fmt.Sprintf(" (the reload command's own time); %s of %s answers in the next %s without the proxy",
					count(x.Without), count(x.Sampled), num(1.5*r.CheckMillis/1000, 1)+" s")
			}
			ready := "–"
			switch {
			case x.Ready > 0 && x.ReadyWithoutA == 0:
				ready = "200 after " + num(x.Ready, 0) + " ms, never before it had the A record"
			case x.Ready > 0:
				ready = fmt.Sprintf("%s checks said 200 while the name had no A record (the first with it after %s ms)", count(x.ReadyWithoutA), num(x.Ready, 0))
			case x.ReadyWithoutA > 0:
				ready = count(x.ReadyWithoutA) + " checks said 200 while the name had no A record"
			}
			rows = append(rows, []string{x.Case, first, ready})
		}
		return table([]string{"what restarted", "first A record at the seed after", "`/ready` of the seed"}, rows), nil
	})
}
