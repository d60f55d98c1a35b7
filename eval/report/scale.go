package main

import "fmt"

// eval/scale: memory, disk and restart time per object of coral_proxy,
// nginx and Varnish as their caches grow.

// scaleResult is the part of docs/eval/scale.json the renderers read.
type scaleResult struct {
	Params struct {
		Counts      []int `json:"counts"`
		Concurrency int   `json:"concurrency"`
		ObjectBytes int   `json:"object_bytes"`
	} `json:"params"`
	Servers []struct {
		Name     string `json:"name"`
		Resident string `json:"resident"`
		Points   []struct {
			Objects          int     `json:"objects"`
			MissPerSecond    float64 `json:"miss_per_second"`
			ResidentPerObj   float64 `json:"resident_bytes_per_object"`
			IndexBytesPerObj float64 `json:"index_bytes_per_object"`
			IndexPerObj      float64 `json:"index_heap_bytes_per_object"`
			RefsHeap         float64 `json:"references_heap_bytes"`
			DHTHeap          float64 `json:"dsht_heap_bytes"`
			OffheapPerObj    float64 `json:"offheap_bytes_per_object"`
			DiskPerObj       float64 `json:"disk_bytes_per_object"`
			InodesPerObj     float64 `json:"inodes_per_object"`
			RestartSeconds   float64 `json:"restart_to_hit_seconds"`
			KillRestartSecs  float64 `json:"kill_restart_to_hit_seconds"`
			RestartResident  float64 `json:"resident_bytes_per_object_after_restart"`
			Load             string  `json:"load"`
		} `json:"points"`
	} `json:"servers"`
}

func scaleOrDash(v float64, format func(float64) string) string {
	if v == 0 {
		return "–"
	}
	return format(v)
}

func init() {
	// scale.table FILE: every server at every count.
	register("scale.table", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 1, "FILE"); err != nil {
			return "", err
		}
		var r scaleResult
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		b0 := func(v float64) string { return num(v, 0) }
		b2 := func(v float64) string { return num(v, 2) }
		var rows [][]string
		for _, s := range r.Servers {
			for _, p := range s.Points {
				other := "–"
				if p.RefsHeap > 0 || p.DHTHeap > 0 {
					other = num(p.RefsHeap/float64(p.Objects), 0) + " / " + num(p.DHTHeap/float64(p.Objects), 0)
				}
				rows = append(rows, []string{s.Name, count(p.Objects), num(p.MissPerSecond, 0),
					num(p.ResidentPerObj, 0), scaleOrDash(p.IndexBytesPerObj, b0) + " / " + scaleOrDash(p.IndexPerObj, b0), other, scaleOrDash(p.OffheapPerObj, b0), scaleOrDash(p.RestartResident, b0),
					num(p.DiskPerObj, 0), num(p.InodesPerObj, 2),
					scaleOrDash(p.RestartSeconds, b2) + " / " + scaleOrDash(p.KillRestartSecs, b2), p.Load})
			}
		}
		return table([]string{"server", "objects", "misses/s (fill)", "resident B/object", "index B/object (store's count / heap profile)",
			"references / DSHT B/object (heap profile)", "off-heap B/object (index and references)", "resident B/object after restart", "disk B/object", "inodes/object",
			"restart to first hit s (SIGTERM / SIGKILL)", "load average"}, rows), nil
	})

	// scale.value FILE SERVER COUNT FIELD: one figure (misses, resident,
	// index, offheap, disk, inodes, restart, kill-restart).
	register("scale.value", func(c *results, args []string) (string, error) {
		if err := needArgs(args, 4, "FILE SERVER COUNT FIELD"); err != nil {
			return "", err
		}
		var r scaleResult
		if err := c.load(args[0], &r); err != nil {
			return "", err
		}
		for _, s := range r.Servers {
			if s.Name != args[1] {
				continue
			}
			for _, p := range s.Points {
				if fmt.Sprint(p.Objects) != args[2] {
					continue
				}
				switch args[3] {
				case "misses":
					return num(p.MissPerSecond, 0), nil
				case "resident":
					return num(p.ResidentPerObj, 0), nil
				case "index":
					return num(p.IndexBytesPerObj, 0), nil
				case "index-heap":
					return num(p.IndexPerObj, 0), nil
				case "offheap":
					return num(p.OffheapPerObj, 0), nil
				case "disk":
					return num(p.DiskPerObj, 0), nil
				case "inodes":
					return num(p.InodesPerObj, 2), nil
				case "restart":
					return secs(p.RestartSeconds), nil
				case "kill-restart":
					return secs(p.KillRestartSecs), nil
				case "restart-resident":
					return num(p.RestartResident, 0), nil
				}
				return "", fmt.Errorf("scale.value: no field %q", args[3])
			}
		}
		return "", fmt.Errorf("scale.value: no %s at %s objects in %s", args[1], args[2], args[0])
	})
}
