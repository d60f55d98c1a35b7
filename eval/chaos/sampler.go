//go:build linux

package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// peerSample is what the proxies' metrics said in one interval: peer
// fetches that failed (timeout, error) and that succeeded.
type peerSample struct {
	At             float64
	Failed, Served float64
}

// sampler reads every running proxy's caddy_coral_peer_fetches_total once
// a second and keeps the increase (a restarted proxy starts from zero).
type sampler struct {
	net *coralnet.Net
	rec *recorder

	mu      sync.Mutex
	last    map[int]map[string]float64
	samples []peerSample
}

func (s *sampler) run(ctx context.Context) {
	s.last = map[int]map[string]float64{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) once(ctx context.Context) {
	var sample peerSample
	for _, nd := range s.net.Nodes {
		if !nd.Running() {
			delete(s.last, nd.Index) // it starts from zero when it comes back
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := s.net.Metrics(cctx, nd, coralnet.PortAdmin, "caddy_coral_peer_fetches_total")
		cancel()
		if err != nil {
			continue
		}
		prev := s.last[nd.Index]
		for labels, v := range m {
			d := v
			if p, ok := prev[labels]; ok && v >= p {
				d = v - p
			}
			switch {
			case strings.Contains(labels, `outcome="timeout"`), strings.Contains(labels, `outcome="error"`):
				sample.Failed += d
			case strings.Contains(labels, `outcome="ok"`):
				sample.Served += d
			}
		}
		s.last[nd.Index] = m
	}
	sample.At = s.rec.now()
	s.mu.Lock()
	s.samples = append(s.samples, sample)
	s.mu.Unlock()
}

// between sums the samples with from <= At < to.
func (s *sampler) between(from, to float64) (failed, served float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.samples {
		if x.At >= from && x.At < to {
			failed += x.Failed
			served += x.Served
		}
	}
	return
}
