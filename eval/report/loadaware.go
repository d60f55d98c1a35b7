package main

import (
	"fmt"
	"slices"
	"time"
)

// eval/loadaware (issue 41): a crowd at one site before and after
// load-aware redirection, and two origins behind one proxy with the
// budget of before and with fair shares, in loadaware.json.

type loadawareShare struct {
	Requests    int   `json:"requests"`
	Served      int   `json:"served"`
	Redirected  int   `json:"redirected"`
	BytesServed int64 `json:"bytes_served"`
}

type loadawareReport struct {
	Crowd struct {
		Duration    time.Duration `json:"duration_ns"`
		Clients     int           `json:"clients"`
		Think       time.Duration `json:"think_ns"`
		OriginDelay time.Duration `json:"origin_delay_ns"`
		Budget      string        `json:"budget_per_hour"`
		ObjectBytes int           `json:"object_bytes"`
		Objects     int           `json:"objects"`
		AnswerTTL   int           `json:"answer_ttl_s"`
		Sites       []struct {
			Name, Region string
			Proxies      int
		}
	} `json:"crowd_params"`
	Crowds []struct {
		LoadThreshold     string             `json:"load_threshold"`
		Requests          int                `json:"requests"`
		Failures          int                `json:"failures"`
		Served            map[string]int     `json:"served"`
		OriginByProxies   int64              `json:"origin_by_proxies"`
		OriginByClients   int64              `json:"origin_by_clients"`
		Latency           loadawarePct       `json:"latency_ms"`
		LatencyProxies    loadawarePct       `json:"latency_proxies_ms"`
		LatencyRedirected loadawarePct       `json:"latency_redirected_ms"`
		NamedAfterLoaded  map[string]float64 `json:"named_after_loaded_s"`
	} `json:"crowds"`
	Fair struct {
		Rounds     int    `json:"rounds"`
		Budget     string `json:"budget_per_hour"`
		HotBytes   int    `json:"hot_bytes"`
		HotPer     int    `json:"hot_requests_per_round"`
		SmallBytes int    `json:"small_bytes"`
	} `json:"fair_params"`
	Fairs []struct {
		Share     string             `json:"bandwidth_share"`
		Hot       loadawareShare     `json:"hot"`
		Small     loadawareShare     `json:"small"`
		Decisions map[string]float64 `json:"decisions"`
	} `json:"fairs"`
}

type loadawarePct struct {
	N             int
	P50, P90, P99 float64
}

func (c *results) loadaware() (loadawareReport, error) {
	var r loadawareReport
	err := c.load("loadaware.json", &r)
	return r, err
}

// kib formats bytes in KiB.
func kib(b int64) string { return num(float64(b)/1024, 0) + " KiB" }

func init() {
	// loadaware.crowd: where the crowd's requests were served, the
	// origin's requests and the clients' latency, per run.
	register("loadaware.crowd", func(c *results, args []string) (string, error) {
		r, err := c.loadaware()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Crowds {
			share := func(k string) string {
				return count(x.Served[k]) + " (" + pct(float64(x.Served[k])/float64(max(x.Requests, 1)), 0) + ")"
			}
			rows = append(rows, []string{"`" + x.LoadThreshold + "`", count(x.Requests), share("site"), share("region"), share("other_region"), share("origin"),
				count(x.OriginByProxies), count(x.OriginByClients),
				ms(x.Latency.P50) + " / " + ms(x.Latency.P90) + " / " + ms(x.Latency.P99), count(x.Failures)})
		}
		return table([]string{"load_threshold", "requests", "served in the site", "in the rest of its region", "in the other region",
			"redirected to the origin", "origin requests by proxies", "by redirected clients", "latency p50 / p90 / p99 (ms)", "failures"}, rows), nil
	})
	// loadaware.named: how long a loaded proxy was still named, per run.
	register("loadaware.named", func(c *results, args []string) (string, error) {
		r, err := c.loadaware()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Crowds {
			var v []float64
			for _, s := range x.NamedAfterLoaded {
				v = append(v, s)
			}
			slices.Sort(v)
			longest, median := "–", "–"
			if len(v) > 0 {
				longest, median = num(v[len(v)-1], 1)+" s", num(v[len(v)/2], 1)+" s"
			}
			rows = append(rows, []string{"`" + x.LoadThreshold + "`", count(len(v)), median, longest})
		}
		return table([]string{"load_threshold", "proxies whose budget passed the threshold's share", "named in answers after that: median", "longest"}, rows), nil
	})
	// loadaware.crowd-setup: the crowd's settings in a sentence.
	register("loadaware.crowd-setup", func(c *results, args []string) (string, error) {
		r, err := c.loadaware()
		if err != nil {
			return "", err
		}
		p := r.Crowd
		proxies := 0
		for _, s := range p.Sites {
			proxies += s.Proxies
		}
		return fmt.Sprintf("%s proxies in %s sites of two regions, each with a budget of %s an hour; %s clients, each fetching one of %s objects of %s every %s for %s; the origin answers after %s; answer TTL %s s",
			count(proxies), count(len(p.Sites)), p.Budget, count(p.Clients), count(p.Objects), kib(int64(p.ObjectBytes)), dur(p.Think), dur(p.Duration), dur(p.OriginDelay), count(p.AnswerTTL)), nil
	})
	// loadaware.fair: bytes served and redirects per origin, per budget.
	register("loadaware.fair", func(c *results, args []string) (string, error) {
		r, err := c.loadaware()
		if err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Fairs {
			rows = append(rows, []string{"`" + x.Share + "`",
				count(x.Hot.Served), count(x.Hot.Redirected), kib(x.Hot.BytesServed),
				count(x.Small.Served), count(x.Small.Redirected), kib(x.Small.BytesServed),
				num(x.Decisions["within_share"], 0), num(x.Decisions["over_share"], 0), num(x.Decisions["exhausted"], 0)})
		}
		return table([]string{"bandwidth_share", "hot: served", "hot: redirected", "hot: bytes served", "small: served", "small: redirected", "small: bytes served",
			"decisions: within_share", "over_share", "exhausted"}, rows), nil
	})
	// loadaware.fair-setup: the fair-share run's settings in a sentence.
	register("loadaware.fair-setup", func(c *results, args []string) (string, error) {
		r, err := c.loadaware()
		if err != nil {
			return "", err
		}
		p := r.Fair
		return fmt.Sprintf("a budget of %s an hour; %s rounds of %s requests for the hot origin's objects of %s and one for the small origin's of %s",
			p.Budget, count(p.Rounds), count(p.HotPer), kib(int64(p.HotBytes)), kib(int64(p.SmallBytes))), nil
	})
}
