package main

import (
	"fmt"
	"sort"
	"strings"
)

// eval/negative (issue 41): what reaches an origin when crowds ask three
// proxies for errors, an uncacheable answer and a slow one, in
// negative.json.

type negativeReport struct {
	Proxies int `json:"proxies"`
	Clients int `json:"clients"`
	Rows    []struct {
		Answer         string         `json:"answer"`
		Doc            string         `json:"doc"`
		Crowd          string         `json:"crowd"`
		Requests       int            `json:"requests"`
		OriginRequests int64          `json:"origin_requests"`
		Statuses       map[string]int `json:"statuses"`
		Seconds        float64        `json:"seconds"`
	} `json:"rows"`
}

func init() {
	// negative.table: one row per answer and crowd.
	register("negative.table", func(c *results, args []string) (string, error) {
		var r negativeReport
		if err := c.load("negative.json", &r); err != nil {
			return "", err
		}
		var rows [][]string
		for _, x := range r.Rows {
			var st []string
			for k, v := range x.Statuses {
				st = append(st, fmt.Sprintf("%s × %s", k, count(v)))
			}
			sort.Strings(st)
			rows = append(rows, []string{x.Doc, x.Crowd, count(x.Requests), count(x.OriginRequests), strings.Join(st, ", "), secs(x.Seconds)})
		}
		return table([]string{"the origin's answer", "crowd", "requests", "origin requests", "clients got", "seconds"}, rows), nil
	})
	// negative.setup: the fleet and the clients.
	register("negative.setup", func(c *results, args []string) (string, error) {
		var r negativeReport
		if err := c.load("negative.json", &r); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s proxies, %s client addresses", count(r.Proxies), count(r.Clients)), nil
	})
}
