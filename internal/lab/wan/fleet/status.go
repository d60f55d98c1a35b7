//go:build linux

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// WaitReady waits until every node's CoreDNS is ready (its node joined,
// its live sweep done) and sees a live proxy at level 0, and every Caddy
// has joined. (A name server knows the level-0 members its routing tables
// hold, not all of a large fleet: at most some dozens.)
func (f *Fleet) WaitReady(ctx context.Context) error {
	for _, nd := range f.Nodes {
		if err := f.poll(ctx, nd.Name()+" ready", func() error {
			if err := nd.ok(ctx, fmt.Sprintf("http://127.0.0.1:%d/ready", PortReady)); err != nil {
				return err
			}
			st, err := nd.Status(ctx)
			if err != nil {
				return err
			}
			if !st.Node.Joined {
				return errors.New("caddy not joined")
			}
			live, err := nd.Metric(ctx, PortMetrics, "coredns_coral_live_proxies", "level", "0")
			if err != nil {
				return err
			}
			if live < 1 {
				return errors.New("CoreDNS sees no live proxy")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fleet) poll(ctx context.Context, what string, cond func() error) error {
	var last error
	for {
		if err := f.Check(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (nd *Node) get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return nd.ctl.Do(req)
}

func (nd *Node) ok(ctx context.Context, url string) error {
	resp, err := nd.get(ctx, url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Status is the part of Caddy's /coral/status the lab reads.
type Status struct {
	Node struct {
		ID      string     `json:"id"`
		Address string     `json:"address"`
		Joined  bool       `json:"joined"`
		Started *time.Time `json:"started"`
	} `json:"node"`
	Levels []struct {
		Level          int        `json:"level"`
		Threshold      string     `json:"threshold"`
		Cluster        string     `json:"cluster"`
		ClusterLogSize float64    `json:"cluster_log_size"`
		Contacts       int        `json:"contacts"`
		Changes        int        `json:"changes"`
		LastChange     *time.Time `json:"last_change"`
	} `json:"levels"`
	DHT struct {
		Peers          int    `json:"peers"`
		ClusterRounds  uint64 `json:"cluster_rounds"`
		ClusterChanges uint64 `json:"cluster_changes"`
		Timeouts       uint64 `json:"timeouts"`
	} `json:"dht"`
}

// AdminJSON GETs path from the node's Caddy admin API into v.
func (nd *Node) AdminJSON(ctx context.Context, path string, v any) error {
	resp, err := nd.get(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", PortAdmin, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", nd.Name(), path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Status reads the node's Caddy /coral/status.
func (nd *Node) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := nd.AdminJSON(ctx, "/coral/status", &st); err != nil {
		return nil, err
	}
	if st.Node.Address == "" {
		return nil, fmt.Errorf("%s /coral/status: no node", nd.Name())
	}
	return &st, nil
}

// Metrics returns one metric family's samples from the node's CoreDNS
// (PortMetrics) or Caddy (PortAdmin), by label text.
func (nd *Node) Metrics(ctx context.Context, port int, name string) (map[string]float64, error) {
	resp, err := nd.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", nd.Name(), resp.Status)
	}
	return coralnet.ParseMetrics(resp.Body, name)
}

// Metric is the sum of a family's samples whose label key is val (all of
// them when key is "").
func (nd *Node) Metric(ctx context.Context, port int, name, key, val string) (float64, error) {
	m, err := nd.Metrics(ctx, port, name)
	if err != nil {
		return 0, err
	}
	return coralnet.SumSamples(m, key, val), nil
}
