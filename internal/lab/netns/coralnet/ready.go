//go:build linux

package coralnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// WaitReady waits until every running node's CoreDNS is ready and sees
// every running proxy live (level 0), and every running Caddy has joined
// the DSHT.
func (n *Net) WaitReady(ctx context.Context) error {
	var live int
	for _, nd := range n.Nodes {
		if nd.Running() {
			live++
		}
	}
	for _, nd := range n.Nodes {
		if !nd.Running() {
			continue
		}
		if err := n.poll(ctx, nd.Host.Name+" ready", func() error {
			if err := n.ok(ctx, fmt.Sprintf("http://%s/ready", netip.AddrPortFrom(nd.Addr(), PortReady))); err != nil {
				return err
			}
			var st struct {
				Node *struct {
					Joined bool `json:"joined"`
				} `json:"node"`
			}
			if err := n.AdminJSON(ctx, nd, "/coral/status", &st); err != nil {
				return err
			}
			if st.Node == nil || !st.Node.Joined {
				return errors.New("caddy not joined")
			}
			got, err := n.Metric(ctx, nd, PortMetrics, "coredns_coral_live_proxies", "level", "0")
			if err != nil {
				return err
			}
			if int(got) != live {
				return fmt.Errorf("CoreDNS sees %v live proxies, want %d", got, live)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (n *Net) poll(ctx context.Context, what string, cond func() error) error {
	var last error
	for {
		if err := n.Check(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Net) ok(ctx context.Context, url string) error {
	resp, err := n.Get(ctx, url)
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

// AdminJSON GETs path from the node's Caddy admin API into v.
func (n *Net) AdminJSON(ctx context.Context, nd *Node, path string, v any) error {
	resp, err := n.Get(ctx, fmt.Sprintf("http://%s%s", netip.AddrPortFrom(nd.Addr(), PortAdmin), path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("admin %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Metrics returns the samples of one metric family from a node's
// Prometheus endpoint (PortAdmin: Caddy, PortMetrics: CoreDNS), each as
// its label text ("outcome=\"ok\"") and value.
func (n *Net) Metrics(ctx context.Context, nd *Node, port uint16, name string) (map[string]float64, error) {
	resp, err := n.Get(ctx, fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(nd.Addr(), port)))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", nd.Host.Name, resp.Status)
	}
	return ParseMetrics(resp.Body, name)
}

// ParseMetrics reads Prometheus's text format and returns the samples of
// the family name: each sample's label text and value (samples with the
// same labels are added). Lines it cannot read are skipped.
func ParseMetrics(r io.Reader, name string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			l, v, ok := strings.Cut(rest[1:], "} ")
			if !ok {
				continue
			}
			labels, value = l, v
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		if f, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out[labels] += f
		}
	}
	return out, sc.Err()
}

// Metric returns the sum of a metric's samples whose label key has value
// val (all samples when key is "").
func (n *Net) Metric(ctx context.Context, nd *Node, port uint16, name, key, val string) (float64, error) {
	m, err := n.Metrics(ctx, nd, port, name)
	if err != nil {
		return 0, err
	}
	return SumSamples(m, key, val), nil
}

// SumSamples is the sum of the samples (ParseMetrics) whose label key has
// value val (all samples when key is "").
func SumSamples(m map[string]float64, key, val string) float64 {
	var sum float64
	for labels, v := range m {
		if key == "" || strings.Contains(","+labels+",", fmt.Sprintf(",%s=%q,", key, val)) {
			sum += v
		}
	}
	return sum
}
