//go:build linux

package resolverlab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/labresult"
	"github.com/coralcdn/coral/internal/lab/resolvers"
	"github.com/miekg/dns"
)

// TestProofPerResolver: each resolver, in a /24 of its own that no Coral
// server has measured or mapped, resolves four fresh Coralized names (QNAME
// minimisation on); the near servers' logs then say how its queries proved
// their source (plugin/coredns proof.go: a valid server cookie, TCP after a
// truncated response, familiarity) and what the answers were ranked on.
// Every resolver must get every name, and from its first proven query on,
// its answers must be mapped toward it (not unproven, skipped or limited):
// proximity reaches its clients. RESOLVERLAB_PROOFS=FILE writes the table
// (relative names are from the repository root).
func TestProofPerResolver(t *testing.T) {
	requireLab(t, resolvers.Kinds...)
	res := labresult.Start("test/resolverlab", "TestProofPerResolver", labresult.Loopback, "RESOLVERLAB_PROOFS")
	lab := startCoralLab(t)
	var proofs []resolverProofs
	for i, kind := range resolvers.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			addr := netip.AddrFrom4([4]byte{127, 0, byte(110 + i), 11})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := resolvers.Start(ctx, kind, resolvers.Options{Addr: addr, RootHints: []netip.Addr{labRoot}, QNameMinimisation: true, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			for n := 1; n <= 4; n++ {
				label := fmt.Sprintf("p%d-%s", n, kind)
				resp, err := ask(addr, label+".example.com.nyud.test.", dns.TypeA)
				if err != nil || resp.Rcode != dns.RcodeSuccess || len(addrsIn(resp)) == 0 {
					t.Fatalf("%s: %v %v", label, err, resp)
				}
				lab.syncLogs(t, label)
			}
			p := lab.proofsOf(string(kind), "qmin", addr)
			proofs = append(proofs, p)
			t.Log(p)
			if p.CookieUDP+p.TCP == 0 {
				t.Errorf("no query proved its source strongly (cookie or TCP): the first mapping could not start")
			}
			for _, src := range []string{"skipped", "limited"} {
				if p.Proximity[src] > 0 {
					t.Errorf("%d answers %s", p.Proximity[src], src)
				}
			}
			if p.Proximity["unproven"] > p.Truncated {
				t.Errorf("%d answers ranked without a mapping for want of a proof, %d truncated: an unproven query was answered without a mapping instead of truncated", p.Proximity["unproven"], p.Truncated)
			}
		})
	}
	var b strings.Builder
	for _, p := range proofs {
		fmt.Fprintf(&b, "%s\n", p)
	}
	t.Logf("how each resolver's queries proved their source to the Coral servers, and what their answers were ranked on:\n%s", b.String())
	if err := res.Write(map[string]any{"resolvers": proofs}); err != nil {
		t.Error(err)
	}
}

// resolverProofs counts, over every Coral server's log, the queries one
// resolver sent: how they proved their source, and what the answers'
// choice was ranked on.
type resolverProofs struct {
	Resolver string `json:"resolver"`
	Mode     string `json:"mode"`
	Queries  int    `json:"queries"`
	// CookieUDP are UDP queries with a valid server cookie, TCP the
	// queries over TCP, FamiliarUDP UDP queries from an address answered
	// before, UnprovenUDP the others; Truncated the responses with TC
	// (sent when a query needed a probe its source had not proven it may
	// start).
	CookieUDP   int `json:"cookie_udp"`
	TCP         int `json:"tcp"`
	FamiliarUDP int `json:"familiar_udp"`
	UnprovenUDP int `json:"unproven_udp"`
	Truncated   int `json:"truncated"`
	// Proximity counts the answers by the source of their ranking
	// (hints, no_hints, pending, unproven, ...).
	Proximity map[string]int `json:"proximity"`
}

func (p resolverProofs) String() string {
	return fmt.Sprintf("%-8s %-7s %4d queries: %3d UDP with a valid cookie, %3d TCP, %3d UDP familiar, %3d UDP unproven; %3d truncated; ranked on %v",
		p.Resolver, p.Mode, p.Queries, p.CookieUDP, p.TCP, p.FamiliarUDP, p.UnprovenUDP, p.Truncated, p.Proximity)
}

// proofsOf reads the servers' logs for addr's queries. A line is the
// common log format and then {/coral/proof} {/coral/proximity}.
func (lab *coralLab) proofsOf(kind, mode string, addr netip.Addr) resolverProofs {
	p := resolverProofs{Resolver: kind, Mode: mode, Proximity: map[string]int{}}
	for _, srv := range append([]*corednsProc{lab.far}, lab.near...) {
		for _, line := range strings.Split(srv.logText(), "\n") {
			if !strings.HasPrefix(line, "[INFO] "+addr.String()+":") && !strings.Contains(line, " "+addr.String()+":") {
				continue
			}
			f := strings.Fields(line)
			q := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, `"`) && !strings.HasPrefix(s, `"`) })
			if q < 0 || len(f) < q+5 {
				continue
			}
			proto, rflags, proof := f[q-3], f[q+2], f[q+5]
			p.Queries++
			switch {
			case proto == "tcp":
				p.TCP++
			case proof == "strong":
				p.CookieUDP++
			case proof == "familiar":
				p.FamiliarUDP++
			default:
				p.UnprovenUDP++
			}
			if strings.Contains(rflags, "tc") {
				p.Truncated++
			}
			if len(f) > q+6 {
				p.Proximity[f[q+6]]++
			}
		}
	}
	return p
}
