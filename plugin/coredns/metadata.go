package coral

import (
	"context"
	"strconv"
	"strings"

	"github.com/coredns/coredns/plugin/metadata"
	"github.com/coredns/coredns/request"
)

// Metadata implements metadata.Provider: with the metadata plugin in the
// server block, the log plugin (or any other) can show what each answer
// was based on:
//
//	{/coral/level}      the level the resolver (or its ECS client) was placed at; empty when the answer did not depend on it
//	{/coral/proof}      what the query showed of its source (proof.go): strong, familiar or none
//	{/coral/proximity}  what the choice of proxies and name servers was ranked on (the source label of coredns_coral_proximity_total); empty when not consulted
//	{/coral/hints}      the nodes ranked near the client, best first, each with where its hint was (0: the client's /24, 1: the router nearest it, …): "192.0.2.7=0 198.51.100.2=1"
func (c *Coral) Metadata(ctx context.Context, _ request.Request) context.Context {
	info := &queryInfo{level: -1}
	ctx = context.WithValue(ctx, infoKey{}, info)
	metadata.SetValueFunc(ctx, "coral/level", func() string {
		if info.level < 0 {
			return ""
		}
		return strconv.Itoa(info.level)
	})
	metadata.SetValueFunc(ctx, "coral/proof", func() string { return info.proof.String() })
	metadata.SetValueFunc(ctx, "coral/proximity", func() string { return info.proximity })
	metadata.SetValueFunc(ctx, "coral/hints", info.hintsString)
	return ctx
}

type infoKey struct{}

// queryInfo is what one answer was based on (Metadata).
type queryInfo struct {
	level     int // -1: none
	proof     proof
	proximity string
	hints     []nearNode
}

func (q *queryInfo) setProof(p proof) {
	if q != nil {
		q.proof = p
	}
}

func (q *queryInfo) setLevel(level int) {
	if q != nil {
		q.level = level
	}
}

func (q *queryInfo) setNear(source string, ranked []nearNode) {
	if q != nil {
		q.proximity, q.hints = source, ranked
	}
}

func (q *queryInfo) hintsString() string {
	var b strings.Builder
	for i, n := range q.hints {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(n.addr.String())
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(n.hop))
	}
	return b.String()
}
