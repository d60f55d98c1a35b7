package main

import (
	"fmt"
	"strings"
)

// The figures README.md quotes, each with the section of
// docs/evaluation.md that explains it.

func init() {
	register("headlines", func(c *results, args []string) (string, error) {
		var b strings.Builder
		line := func(format string, a ...any) { fmt.Fprintf(&b, "- "+format+"\n", a...) }

		type fig5 struct{ trace, multi, mt []string }
		var byVariant [2]fig5
		minutes := ""
		for vi, v := range []string{"beside", "apart"} {
			for _, topo := range []string{"wonderproxy", "synthetic"} {
				r, err := c.e2e(topo)
				if err != nil {
					return "", err
				}
				s, err1 := r.find("single", v)
				m, err2 := r.find("multi", v)
				t, err3 := r.find("traceroute", v)
				if err := firstErr(err1, err2, err3); err != nil {
					return "", err
				}
				byVariant[vi].trace = append(byVariant[vi].trace, times(s.AllP50/t.AllP50, 1))
				byVariant[vi].multi = append(byVariant[vi].multi, times(s.AllP50/m.AllP50, 1))
				byVariant[vi].mt = append(byVariant[vi].mt, times(m.AllP50/t.AllP50, 2))
				minutes = num(r.Params.Duration.Minutes(), 0)
			}
		}
		line("**End-to-end latency** ([Fig. 5](docs/evaluation.md#end-to-end-latency-figure-5)), in virtual time over %s minutes, with traces that walk a model "+
			"of the routers: a median request with single-level DNS takes %s (WonderProxy matrix / synthetic world) as long as with multi-level DNS and "+
			"traceroute for clients beside a proxy (the paper: about four times), and %s for clients sharing no prefix with a proxy. Against multi-level "+
			"DNS without traceroute: %s and %s, growing with the run's length; multi-level without traceroute over multi-level with it, clients sharing "+
			"no prefix: %s.",
			minutes, strings.Join(byVariant[0].trace, " / "), strings.Join(byVariant[1].trace, " / "),
			strings.Join(byVariant[0].multi, " / "), strings.Join(byVariant[1].multi, " / "), strings.Join(byVariant[1].mt, " / "))

		hs, err := c.hotspot("hotspot.json")
		if err != nil {
			return "", err
		}
		if hs.Busiest == nil {
			return "", fmt.Errorf("hotspot.json has no busiest summary")
		}
		bs := hs.Busiest
		plain := []string{}
		for _, pl := range hs.Plains {
			plain = append(plain, fmt.Sprintf("%s Coral's busiest on the %s", times(hs.PlainBus[pl.Topology], 0), topoName(pl.Topology)))
		}
		line("**Hot key** ([Fig. 8](docs/evaluation.md#load-on-a-hot-key-paper-fig-8)), n = %d, β·⌈log₂ n⌉ = %d put RPCs a minute: "+
			"the key's closest node took at most %s; the busiest node exceeded the bound on %d of %d keys, by up to %s. A plain DHT's busiest node takes %s.",
			hs.Coral.N, bs.Bound, num(bs.ClosestMax, 0), bs.Keys-bs.Within, bs.Keys, times(bs.MaxOverBnd, 2), strings.Join(plain, " and "))

		gp, err := c.getlatency("paper", "wonderproxy")
		if err != nil {
			return "", err
		}
		gz, err := c.getlatency("zipf", "wonderproxy")
		if err != nil {
			return "", err
		}
		line("**Get latency** ([Fig. 6](docs/evaluation.md#get-latency-with-and-without-the-hierarchy-paper-fig-6)), three levels against one at the median: "+
			"%s when %s of the nodes hold every key (the paper's kind of workload), %s when %d nodes hold each of %s keys of Zipf popularity.",
			speedup(gp.Single.P50, gp.Multi.P50), pct(gp.PutFraction, 0), speedup(gz.Single.P50, gz.Multi.P50), gz.Putters, count(gz.Keys))

		var fc []string
		for _, f := range []string{"flashcrowd.json", "flashcrowd-formed.json"} {
			r, err := c.flashcrowd(f)
			if err != nil {
				return "", err
			}
			how := "clusters pinned"
			if !r.pinned() {
				how = "clusters formed by the nodes"
			}
			fc = append(fc, fmt.Sprintf("%d origin fetches for %d files with %s (%s requests)", r.Origin.Fetches, r.Params.Files, how, count(r.Totals.Requests)))
		}
		fe, err := c.flashcrowd("flashcrowd-error.json")
		if err != nil {
			return "", err
		}
		line("**Flash crowd** ([through real proxies](docs/evaluation.md#flash-crowd-through-real-proxies-paper-fig-4-and-5)): %s; a crowd on a URL "+
			"that answers a bare 404 reached the origin %s in %s requests (negative caching keeps the error a request without the client's fields gets, and the proxy fetches for everyone without them).",
			strings.Join(fc, "; "), timesWord(fe.Origin.ErrorFetches), count(fe.Totals.Requests))

		var conf struct {
			Impls []struct {
				Label    string `json:"label"`
				Required struct{ Passed, Of int }
				Optimal  struct{ Passed, Of int }
				Checks   struct{ Passed, Of int }
			} `json:"implementations"`
		}
		if err := c.load("conformance/summary.json", &conf); err != nil {
			return "", err
		}
		var cs []string
		for _, im := range conf.Impls {
			cs = append(cs, fmt.Sprintf("%s %d / %d / %d", im.Label, im.Required.Passed, im.Optimal.Passed, im.Checks.Passed))
		}
		line("**HTTP caching** ([cache-tests](docs/evaluation.md#http-caching-conformance-strict-mode-against-squid-traffic-server-and-nginx)), "+
			"required / optimal / checks passed: %s.", strings.Join(cs, "; "))
		return b.String(), nil
	})
}

func topoName(t string) string {
	switch t {
	case "wonderproxy", "wonderproxy-2020-07":
		return "WonderProxy matrix"
	case "synthetic":
		return "synthetic world"
	}
	return t
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// timesWord is "once", or n and "times".
func timesWord(n int) string {
	if n == 1 {
		return "once"
	}
	return count(n) + " times"
}
