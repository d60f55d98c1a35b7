package main

import (
	"fmt"
	"strings"
)

// Big files in slices (issue 42): eval/slices's file.

type slicesReport struct {
	Params struct {
		FileBytes   int64 `json:"file_bytes"`
		RangeObject int64 `json:"range_object_bytes"`
		Slice       int64 `json:"slice_bytes"`
		Clients     int   `json:"clients_per_proxy"`
	} `json:"params"`
	Crowd struct {
		OriginBytes      int64   `json:"origin_bytes"`
		OriginRatio      float64 `json:"origin_ratio"`
		OriginRequests   int     `json:"origin_requests"`
		RangesAskedTwice int     `json:"ranges_asked_twice"`
		Seconds          float64 `json:"seconds"`
		Clients          []struct {
			Proxy   int     `json:"proxy"`
			Correct bool    `json:"correct"`
			MBps    float64 `json:"mb_per_second"`
			FirstMs float64 `json:"first_byte_ms"`
		} `json:"clients"`
	} `json:"crowd"`
	Ranges []struct {
		Case        string  `json:"case"`
		Range       string  `json:"range"`
		Status      int     `json:"status"`
		SocketBytes int64   `json:"socket_bytes"`
		Correct     bool    `json:"correct"`
		OriginBytes int64   `json:"origin_bytes"`
		Ms          float64 `json:"ms"`
	} `json:"ranges"`
}

// mib formats bytes in MiB.
func mib(n int64) string { return num(float64(n)/(1<<20), 1) + " MiB" }

func init() {
	// slices: the crowd's line and the cold ranges' table.
	register("slices", func(c *results, args []string) (string, error) {
		var r slicesReport
		if err := c.load("slices.json", &r); err != nil {
			return "", err
		}
		cr := r.Crowd
		if len(cr.Clients) == 0 || len(r.Ranges) == 0 {
			return "", fmt.Errorf("slices.json has no crowd or no ranges")
		}
		var b strings.Builder
		correct, lo, hi := 0, cr.Clients[0].MBps, cr.Clients[0].MBps
		var sum float64
		for _, cl := range cr.Clients {
			if cl.Correct {
				correct++
			}
			lo, hi, sum = min(lo, cl.MBps), max(hi, cl.MBps), sum+cl.MBps
		}
		fmt.Fprintf(&b, "A crowd of %d clients (%d at each of three proxies) on a cold file of %s in slices of %s: the origin sent **%s, %s the file**, in %d requests "+
			"(%d slice ranges asked more than once); %d of %d clients got every byte right; per client %s–%s MB/s (mean %s), all done in %s s.\n\n",
			len(cr.Clients), r.Params.Clients, mib(r.Params.FileBytes), mib(r.Params.Slice), mib(cr.OriginBytes), times(cr.OriginRatio, 3), cr.OriginRequests,
			cr.RangesAskedTwice, correct, len(cr.Clients), num(lo, 0), num(hi, 0), num(sum/float64(len(cr.Clients)), 0), num(cr.Seconds, 1))
		rows := [][]string{}
		for _, x := range r.Ranges {
			ok := "yes"
			if !x.Correct {
				ok = "no"
			}
			rows = append(rows, []string{x.Case, "`" + x.Range + "`", fmt.Sprint(x.Status), count(x.SocketBytes), ok, mib(x.OriginBytes), ms(x.Ms)})
		}
		fmt.Fprintf(&b, "Cold ranges of an object of %s at one proxy, each on a URL of its own:\n\n", mib(r.Params.RangeObject))
		b.WriteString(table([]string{"case", "range", "status", "bytes over the client's socket", "right bytes", "origin bytes for the URL", "ms"}, rows))
		return b.String(), nil
	})
}
