package coral

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/coredns/caddy"
	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/core/dnsserver"
)

// CheckCorefile checks a Corefile as far as it can without starting
// anything or binding any port: its syntax and directive names (stock
// CoreDNS's and coral), and every coral block as the plugin reads it,
// including that the key file can be read and is a key. Other plugins'
// settings are checked only when CoreDNS loads them. It returns how many
// coral blocks it checked.
func CheckCorefile(filename string, input io.Reader) (int, error) {
	valid := slices.Clone(dnsserver.Directives)
	if !slices.Contains(valid, "coral") {
		valid = append(valid, "coral")
	}
	blocks, err := caddyfile.Parse(filename, input, valid)
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, sb := range blocks {
		toks, ok := sb.Tokens["coral"]
		if !ok {
			continue
		}
		n++
		c := caddy.NewTestController("dns", "")
		c.Dispenser = caddyfile.NewDispenserTokens(filename, toks)
		c.ServerBlockKeys = sb.Keys
		cfg, err := parse(c)
		if err == nil {
			err = checkBlockZones(c, cfg)
		}
		if err == nil {
			err = cfg.checkNode()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("server block %v: coral: %w", sb.Keys, err))
		}
	}
	return n, errors.Join(errs...)
}
