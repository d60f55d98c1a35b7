package coral

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	clog "github.com/coredns/coredns/plugin/pkg/log"
	"github.com/miekg/dns"

	"github.com/coralcdn/coral/coraldht/host"
	"github.com/coralcdn/coral/internal/portguard"
)

var log = clog.NewWithPlugin("coral")

func init() { plugin.Register("coral", setup) }

// config is everything parse reads from a coral block.
type config struct {
	zone, alias string

	// node is the DSHT node's options (coraldht/host reads and checks
	// them, as for Caddy); listen and levels are read from it by finish:
	// the listen address as the metrics label, and
	// the RTT thresholds in effect (coraldht's defaults when none given).
	node      host.Options
	nodeBlock host.OptionsParser
	listen    string
	levels    []time.Duration
	overrides []override

	probe         string // auto, tcp, icmp, none
	probeCache    time.Duration
	probeLimit    int
	liveWithin    time.Duration
	checkInterval time.Duration
	syncWait      time.Duration

	rrl *rrlConfig // nil: no response rate limiting

	// drain: at shutdown (not a reload), how long the node stays up out of
	// the name servers handed out before the server stops; 0: none.
	// drainFile: while this file exists the node is draining.
	drain     time.Duration
	drainFile string
	prox      proximityConfig
	ecs       []netip.Prefix // resolvers whose EDNS Client Subnet is used; none: ECS off
	// probeRate: probe starts per minute per source prefix and per
	// destination prefix (proof.go).
	probeRate [2]int

	set settings

	// given: the node is the program's (Options.Node), not the block's.
	given *coraldht.Node
	// file and lines place the errors found once the block is read: the
	// Corefile and the line of each property.
	file  string
	lines map[string]int
}

// errAt is an error about property prop, placed at its line as the
// Corefile parser places its own ("FILE:LINE - Error during parsing: …").
func (cfg *config) errAt(prop, format string, args ...any) error {
	return fmt.Errorf("%s:%d - Error during parsing: %s", cfg.file, cfg.lines[prop], fmt.Sprintf(format, args...))
}

// Defaults. The TTLs are the paper's: 30 s answers at levels 0 and 1 and
// 60 s at level 2 (a client that was placed well keeps its proxies longer),
// and an hour for name servers so that a resolver stays locked on to nearby
// servers once it has found them.
const (
	defaultNSTTL         = time.Hour
	defaultNegTTL        = 30 * time.Second
	defaultRetryTTL      = 10 * time.Second
	defaultAnswers       = 2
	defaultNameservers   = 3
	defaultProbeCache    = 10 * time.Minute
	defaultLiveWithin    = 15 * time.Second
	defaultCheckInterval = 5 * time.Second
	defaultSyncWait      = 250 * time.Millisecond
)

// maxProbeLimit bounds probe_limit: each probe holds a socket or two for
// up to the largest threshold.
const maxProbeLimit = 4096

func defaultAnswerTTLs(levels int) []uint32 {
	out := make([]uint32, levels)
	for i := range out {
		out[i] = 30
		if i >= 2 {
			out[i] = 60
		}
	}
	return out
}

func setup(c *caddy.Controller) error {
	cfg, err := parse(c)
	if err != nil {
		return plugin.Error("coral", err)
	}
	if err := checkBlockZones(c, cfg); err != nil {
		return plugin.Error("coral", err)
	}
	if err := cfg.checkNode(); err != nil {
		return plugin.Error("coral", err)
	}
	registerMetrics()
	if cfg.alias != "" && len(cfg.set.caa) == 0 {
		log.Warningf("no caa lines: any CA may issue certificates for names in %s, by any challenge the proxies relay; see the README's CAA paragraph", cfg.alias)
	}
	if port := dnsserver.GetConfig(c).Port; port != "53" {
		log.Warningf("this server block listens on port %s; resolvers reach the name servers coral hands out on port 53", port)
	}
	cr := newCoral(cfg, Options{})
	// One process per address (internal/portguard): before this server
	// binds, no other process may serve its DNS address or the node's.
	c.OnStartup(func() error {
		dc := dnsserver.GetConfig(c)
		socks, err := portguard.DNSServer(dc.ListenHosts, dc.Port, dc.Transport)
		if err == nil {
			err = portguard.Check(append(socks, portguard.UDP(cfg.node.Listen))...)
		}
		if err != nil {
			return plugin.Error("coral", err)
		}
		return nil
	})
	c.OnStartup(cr.Start)
	c.OnShutdown(cr.Stop)
	if c.Get(restartFailedKey{}) == nil {
		// Once per server instance, however many coral blocks it has.
		c.Set(restartFailedKey{}, true)
		c.OnRestartFailed(reloadFailed)
	}
	dnsserver.GetConfig(c).AddPlugin(func(next plugin.Handler) plugin.Handler {
		cr.Next = next
		return cr
	})
	return nil
}

// checkBlockZones makes sure the server block routes the coral and alias
// zones here; otherwise their queries would never reach the plugin.
func checkBlockZones(c *caddy.Controller, cfg *config) error {
	if len(c.ServerBlockKeys) == 0 {
		return nil
	}
	for _, z := range []string{cfg.zone, cfg.alias} {
		if z == "" {
			continue
		}
		found := false
		for _, k := range c.ServerBlockKeys {
			for _, bz := range plugin.Host(k).NormalizeExact() {
				if dns.IsSubDomain(bz, z) {
					found = true
				}
			}
		}
		if !found {
			prop := "alias"
			if z == cfg.zone {
				prop = "coral"
			}
			return cfg.errAt(prop, "zone %s is not among this server block's zones %v: add it to the block's keys", z, c.ServerBlockKeys)
		}
	}
	return nil
}

// parse reads one coral block:
//
//	coral ZONE {
//	    listen ADDR:PORT
//	    ...
//	}
func parse(c *caddy.Controller) (*config, error) { return parseWith(c, nil) }

// parseWith is parse for a handler that runs on a node of the program's
// (Options.Node), given: the block has no node lines then.
func parseWith(c *caddy.Controller, given *coraldht.Node) (*config, error) {
	var cfg *config
	for c.Next() {
		if cfg != nil {
			return nil, c.Err("coral may appear only once per server block")
		}
		var err error
		if cfg, err = parseBlock(c, given); err != nil {
			return nil, err
		}
	}
	if cfg == nil {
		return nil, errors.New("no coral block")
	}
	return cfg, nil
}

// newConfig is a configuration with every default.
func newConfig() *config {
	return &config{
		probe:         "auto",
		probeCache:    defaultProbeCache,
		probeLimit:    defaultProbeLimit,
		liveWithin:    defaultLiveWithin,
		checkInterval: defaultCheckInterval,
		syncWait:      defaultSyncWait,
		probeRate:     [2]int{defaultSourceRate, defaultDestinationRate},
		prox: proximityConfig{mode: proximityOn, wait: defaultProximityWait, timeout: defaultProximityTimeout, cache: defaultProbeCache,
			hops: defaultProximityHops, limit: defaultProximityLimit, entries: proximityEntries},
		set: settings{
			nsTTL:         uint32(defaultNSTTL.Seconds()),
			negTTL:        uint32(defaultNegTTL.Seconds()),
			retryTTL:      uint32(defaultRetryTTL.Seconds()),
			answers:       defaultAnswers,
			nameservers:   defaultNameservers,
			loadThreshold: defaultLoadThreshold,
		},
	}
}

// repeatable are the properties a block may have more than once; every
// other property is given at most once (a second line is an error, not a
// silent replacement of the first).
var repeatable = map[string]bool{"bootstrap": true, "cluster": true, "classify": true, "caa": true, "ecs": true}

// nodeProperties are the node's options, which coraldht/host reads.
var nodeProperties = map[string]bool{"listen": true, "advertise": true, "bootstrap": true, "key": true, "key_file": true, "levels": true, "cluster": true}

// parseBlock reads the zone and the properties of the block whose name
// (coral) c has just read.
func parseBlock(c *caddy.Controller, given *coraldht.Node) (*config, error) {
	cfg := newConfig()
	cfg.given = given
	cfg.file, cfg.lines = c.File(), map[string]int{"coral": c.Line()}
	if dir := os.Getenv("STATE_DIRECTORY"); dir != "" && given == nil {
		// systemd's StateDirectory= (the packaged unit has one).
		cfg.node.StateDir = strings.Split(dir, ":")[0]
	}
	args := c.RemainingArgs()
	if len(args) != 1 {
		return nil, c.Errf("coral takes exactly one argument, the coral zone (got %d)", len(args))
	}
	zone, err := zoneName(c, "coral", args[0])
	if err != nil {
		return nil, err
	}
	cfg.zone = zone
	var answerTTLs []time.Duration
	for c.NextBlock() {
		prop := c.Val()
		if first, dup := cfg.lines[prop]; dup && !repeatable[prop] {
			// (key and key_file together: coraldht/host's parser says so.)
			return nil, c.Errf("%s given twice (first on line %d): it takes one line", prop, first)
		}
		if _, seen := cfg.lines[prop]; !seen {
			cfg.lines[prop] = c.Line()
		}
		if given != nil && nodeProperties[prop] {
			return nil, c.Errf("%s: this handler runs on a node of the program's, whose options are its own", prop)
		}
		known, err := cfg.nodeBlock.Property(c)
		if !known {
			prop, args := c.Val(), c.RemainingArgs()
			known, err = cfg.parseNearProperty(c, prop, args)
			if !known {
				err = cfg.parseProperty(c, prop, args, &answerTTLs)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if err := cfg.finish(c, answerTTLs); err != nil {
		return nil, err
	}
	return cfg, nil
}

// zoneName normalizes a zone argument, which must name one zone.
func zoneName(c *caddy.Controller, prop, arg string) (string, error) {
	zs := plugin.Host(arg).NormalizeExact()
	if len(zs) != 1 {
		return "", c.Errf("%s %q: want one zone name", prop, arg)
	}
	return zs[0], nil
}

// needArgs checks that prop has n arguments.
func needArgs(c *caddy.Controller, prop string, args []string, n int) error {
	if len(args) != n {
		return c.Errf("%s takes %d argument(s), got %d", prop, n, len(args))
	}
	return nil
}

// parseProperty reads a property of the DNS server.
func (cfg *config) parseProperty(c *caddy.Controller, prop string, args []string, answerTTLs *[]time.Duration) error {
	need := func(n int) error { return needArgs(c, prop, args, n) }
	var err error
	switch prop {
	case "alias":
		if err = need(1); err == nil {
			cfg.alias, err = zoneName(c, prop, args[0])
		}
	case "classify":
		if err = need(2); err == nil {
			err = cfg.parseClassify(c, args)
		}
	default:
		if known, err := cfg.parseProbingProperty(c, prop, args); known {
			return err
		}
		if known, err := cfg.parseAnswerProperty(c, prop, args, answerTTLs); known {
			return err
		}
		return c.Errf("unknown property %q", prop)
	}
	return err
}

// durations are the properties that take one duration, and where they go.
func (cfg *config) durations() map[string]*time.Duration {
	return map[string]*time.Duration{
		"probe_cache": &cfg.probeCache, "live_within": &cfg.liveWithin, "check_interval": &cfg.checkInterval,
		"sync_wait": &cfg.syncWait, "drain": &cfg.drain,
		"proximity_wait": &cfg.prox.wait, "proximity_timeout": &cfg.prox.timeout, "proximity_cache": &cfg.prox.cache,
	}
}

// parseProbingProperty reads a property of how clients are measured and
// proxies checked, reporting whether prop is one.
func (cfg *config) parseProbingProperty(c *caddy.Controller, prop string, args []string) (bool, error) {
	need := func(n int) error { return needArgs(c, prop, args, n) }
	var err error
	if into, ok := cfg.durations()[prop]; ok {
		if err = need(1); err == nil {
			*into, err = parseDuration(c, prop, args[0])
		}
		return true, err
	}
	switch prop {
	case "probe":
		if err = need(1); err == nil {
			switch args[0] {
			case "auto", "tcp", "icmp", "none":
				cfg.probe = args[0]
			default:
				err = c.Errf("probe %q: want auto, tcp, icmp or none", args[0])
			}
		}
	case "probe_limit":
		if err = need(1); err == nil {
			cfg.probeLimit, err = parseCount(c, prop, args[0], maxProbeLimit)
		}
	case "drain_file":
		if err = need(1); err == nil {
			cfg.drainFile = args[0]
		}
	case "state_dir":
		if err = need(1); err == nil {
			cfg.node.StateDir = args[0]
			if args[0] == "off" {
				cfg.node.StateDir = ""
			}
		}
	case "probe_rate":
		if len(args) < 1 || len(args) > 2 {
			return true, c.Errf("probe_rate takes SOURCE_PER_MINUTE [DESTINATION_PER_MINUTE], got %d arguments", len(args))
		}
		for i, a := range args {
			if cfg.probeRate[i], err = parseCount(c, prop, a, maxProbeRate); err != nil {
				return true, err
			}
		}
	default:
		return false, nil
	}
	return true, err
}

// parseAnswerProperty reads a property of the answers (counts, TTLs, CAA,
// rate limiting), reporting whether prop is one.
func (cfg *config) parseAnswerProperty(c *caddy.Controller, prop string, args []string, answerTTLs *[]time.Duration) (bool, error) {
	need := func(n int) error { return needArgs(c, prop, args, n) }
	var err error
	switch prop {
	case "answers":
		if err = need(1); err == nil {
			cfg.set.answers, err = parseCount(c, prop, args[0], 16)
		}
	case "nameservers":
		if err = need(1); err == nil {
			cfg.set.nameservers, err = parseCount(c, prop, args[0], 13)
		}
	case "answer_ttl":
		if len(args) == 0 {
			return true, c.Errf("answer_ttl takes one TTL for all levels or one per level")
		}
		*answerTTLs = (*answerTTLs)[:0]
		for _, a := range args {
			d, err := parseTTL(c, prop, a)
			if err != nil {
				return true, err
			}
			*answerTTLs = append(*answerTTLs, d)
		}
	case "caa":
		props, perr := parseCAA(args)
		if perr == nil {
			cfg.set.caa, perr = addCAA(cfg.set.caa, props)
		}
		if perr != nil {
			err = c.Err(perr.Error())
		}
	case "rrl":
		cfg.rrl, err = parseRRL(args)
		if err != nil {
			err = c.Err(err.Error())
		}
	case "load_threshold":
		cfg.set.loadThreshold, err = parseLoadThreshold(c, args)
	case "ns_ttl":
		err = parseTTLInto(c, prop, args, &cfg.set.nsTTL)
	case "negative_ttl":
		err = parseTTLInto(c, prop, args, &cfg.set.negTTL)
	case "retry_ttl":
		err = parseTTLInto(c, prop, args, &cfg.set.retryTTL)
	default:
		return false, nil
	}
	return true, err
}

// parseClassify reads "classify PREFIX LEVEL".
func (cfg *config) parseClassify(c *caddy.Controller, args []string) error {
	pfx, perr := netip.ParsePrefix(args[0])
	if perr != nil {
		if a, aerr := netip.ParseAddr(args[0]); aerr == nil {
			pfx, perr = a.Prefix(a.BitLen())
		}
	}
	if perr != nil {
		return c.Errf("classify %q: not a prefix or address", args[0])
	}
	lvl, lerr := strconv.Atoi(args[1])
	if lerr != nil || lvl < 0 {
		return c.Errf("classify %s %q: the level must be a number 0..n", args[0], args[1])
	}
	cfg.overrides = append(cfg.overrides, override{prefix: pfx.Masked(), level: lvl})
	return nil
}

// finish checks what can only be checked once the whole block is read.
func (cfg *config) finish(c *caddy.Controller, answerTTLs []time.Duration) error {
	if err := cfg.finishNode(c); err != nil {
		return err
	}
	n := len(cfg.levels) + 1
	if _, err := newScheme(cfg.zone, cfg.alias, n); err != nil {
		return c.Err(err.Error())
	}
	for _, o := range cfg.overrides {
		if o.level >= n {
			return c.Errf("classify %s %d: this configuration has levels 0..%d", o.prefix, o.level, n-1)
		}
	}
	// Longest prefix first, so a specific line beats a general one.
	sortOverrides(cfg.overrides)
	switch len(answerTTLs) {
	case 0:
		cfg.set.answerTTL = defaultAnswerTTLs(n)
	case 1:
		cfg.set.answerTTL = make([]uint32, n)
		for i := range cfg.set.answerTTL {
			cfg.set.answerTTL[i] = uint32(answerTTLs[0].Seconds())
		}
	case n:
		for _, d := range answerTTLs {
			cfg.set.answerTTL = append(cfg.set.answerTTL, uint32(d.Seconds()))
		}
	default:
		return c.Errf("answer_ttl: %d TTLs for %d levels; give one, or one per level", len(answerTTLs), n)
	}
	if cfg.liveWithin < time.Second {
		return c.Errf("live_within %v: must be at least 1s", cfg.liveWithin)
	}
	if cfg.checkInterval < 100*time.Millisecond || cfg.checkInterval > cfg.liveWithin/2 {
		return c.Errf("check_interval %v: must be at least 100ms and at most half of live_within (%v), so a live proxy is checked before it counts as stale", cfg.checkInterval, cfg.liveWithin)
	}
	return nil
}

// finishNode takes the node's options: the given node's, or the block's,
// read and checked by coraldht/host (the rules, a key file off loopback
// among them, are shared with Caddy), key files included.
func (cfg *config) finishNode(c *caddy.Controller) error {
	if cfg.given != nil {
		cfg.listen = cfg.given.Addr().String()
		for _, l := range cfg.given.Levels()[1:] {
			cfg.levels = append(cfg.levels, l.Threshold)
		}
		return nil
	}
	stateDir := cfg.node.StateDir
	node, err := cfg.nodeBlock.Finish(c)
	if err != nil {
		return err
	}
	node.StateDir = stateDir
	cfg.node, cfg.listen, cfg.levels = node, node.Listen.String(), node.Levels
	if len(cfg.levels) == 0 {
		cfg.levels = coraldht.DefaultConfig().Levels
	}
	return nil
}

// checkNode checks the node's options as starting it will (coraldht/host's
// Check: the key files are read), placing an error at the key line.
func (cfg *config) checkNode() error {
	if cfg.given != nil {
		return nil
	}
	if err := host.Check(cfg.nodeOptions()); err != nil {
		prop := "key"
		if cfg.lines["key"] == 0 {
			prop = "key_file"
		}
		return cfg.errAt(prop, "%v", err)
	}
	return nil
}

func sortOverrides(os []override) {
	for i := 1; i < len(os); i++ {
		for j := i; j > 0 && os[j].prefix.Bits() > os[j-1].prefix.Bits(); j-- {
			os[j], os[j-1] = os[j-1], os[j]
		}
	}
}

func parseDuration(c *caddy.Controller, prop, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, c.Errf("%s %q: want a positive duration such as 20ms or 1h", prop, s)
	}
	return d, nil
}

func parseTTL(c *caddy.Controller, prop, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		// A bare number is seconds, as in zone files.
		n, nerr := strconv.ParseUint(s, 10, 32)
		if nerr != nil {
			return 0, c.Errf("%s %q: want a duration such as 30s or a number of seconds", prop, s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d.Seconds() > math.MaxInt32 || d%time.Second != 0 {
		return 0, c.Errf("%s %q: want whole seconds between 0 and 2^31-1", prop, s)
	}
	return d, nil
}

func parseTTLInto(c *caddy.Controller, prop string, args []string, into *uint32) error {
	if len(args) != 1 {
		return c.Errf("%s takes 1 argument, got %d", prop, len(args))
	}
	d, err := parseTTL(c, prop, args[0])
	if err != nil {
		return err
	}
	*into = uint32(d.Seconds())
	return nil
}

func parseCount(c *caddy.Controller, prop, s string, most int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, c.Errf("%s %q: want a number 1..%d", prop, s, most)
	}
	return n, nil
}

func (cfg *config) String() string {
	return fmt.Sprintf("coral %s listen %s", cfg.zone, cfg.listen)
}
