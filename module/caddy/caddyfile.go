package coralcaddy

import (
	"net/netip"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/coralcdn/coral/coraldht/host"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/proxy"
)

// The Caddyfile names of the coral app and handlers.
func init() {
	httpcaddyfile.RegisterGlobalOption("coral", parseGlobalCoral)
	httpcaddyfile.RegisterHandlerDirective("coral_proxy", parseHandlerCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("coral_proxy", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterHandlerDirective("coral_status", parseStatusPageCaddyfile)
	// Right after metrics, which puts it just before coral_proxy (ordered
	// before reverse_proxy, which follows metrics): a path-matched
	// coral_status in a coral_proxy site answers before the proxy refuses
	// the host. Caddy lets plugins order only against its own directives.
	httpcaddyfile.RegisterDirectiveOrder("coral_status", httpcaddyfile.After, "metrics")
	// Before coral_proxy too, for the same reason: a path-matched
	// coral_blacklist in a coral_proxy site answers for the node itself.
	httpcaddyfile.RegisterHandlerDirective("coral_blacklist", parseBlacklistServerCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("coral_blacklist", httpcaddyfile.After, "metrics")
}

// parseBlacklistServerCaddyfile reads the coral_blacklist directive.
func parseBlacklistServerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var s BlacklistServer
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return &s, err
}

// parseGlobalCoral reads the global option that configures the coral app:
// the node's options, in the grammar coraldht/host reads for both servers
// (host.ParseOptions):
//
//	{
//	    coral {
//	        listen     IP:PORT
//	        advertise  IP:PORT
//	        bootstrap  IP:PORT...
//	        key        PRIMARY_FILE [ACCEPTED_FILE...]
//	        levels     DURATION...
//	        cluster    LEVEL NAME
//	    }
//	}
func parseGlobalCoral(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		return nil, d.Err("the coral global option may appear only once")
	}
	d.Next() // the option name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	opts, err := host.ParseOptions(optionLines{d})
	if err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "coral", Value: caddyconfig.JSON(appFromOptions(opts), nil)}, nil
}

// optionLines is a Caddyfile dispenser as host.ParseOptions reads it: the
// lines of the block it is in.
type optionLines struct{ *caddyfile.Dispenser }

func (d optionLines) NextBlock() bool { return d.Dispenser.NextBlock(0) }

// appFromOptions is the app's JSON configuration of the node options.
func appFromOptions(o host.Options) *App {
	app := &App{Listen: o.Listen.String(), KeyFile: o.KeyFile, AcceptedKeyFiles: o.AcceptedKeyFiles, Identity: o.Identity, LegacyPeers: o.LegacyPeers}
	if o.Advertise.IsValid() {
		app.Advertise = o.Advertise.String()
	}
	for _, b := range o.Bootstrap {
		app.Bootstrap = append(app.Bootstrap, b.String())
	}
	for _, l := range o.Levels {
		app.Levels = append(app.Levels, caddy.Duration(l))
	}
	for lvl, name := range o.Pins {
		if app.Clusters == nil {
			app.Clusters = map[string]string{}
		}
		app.Clusters[strconv.Itoa(lvl)] = name
	}
	if app.KeyFile != "" {
		// The keys' digest in the adapted JSON makes `caddy reload` see a
		// new key in the same file.
		app.KeyFileSHA256 = keyFilesSHA256(append([]string{app.KeyFile}, app.AcceptedKeyFiles...))
	}
	return app
}

// parseHandlerCaddyfile reads the coral_proxy directive.
func parseHandlerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var hd Handler
	err := hd.UnmarshalCaddyfile(h.Dispenser)
	return &hd, err
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	coral_proxy ZONE {
//	    cache_dir      DIR
//	    cache_size     SIZE          # e.g. 1GiB
//	    max_object_size SIZE         # default cache_size / 8
//	    max_objects    N             # default cache_size / 4KiB
//	    memory_cache_size SIZE|off   # small hot bodies in memory; default 16MiB
//	    slice_size     SIZE|off      # big objects in slices of 1MiB-8MiB; default 4MiB
//	    allow_origins  PREFIX...     # private origins allowed anyway
//	    allow_peers    PREFIX...     # private peer addresses allowed anyway
//	    forward_fields FIELD...      # request fields sent to origins besides the defaults
//	    origin_scheme  http|https|auto
//	    https_redirect [PORT]        # one-label names over http → https
//	    default_ttl    DURATION
//	    min_ttl        DURATION
//	    negative_ttl   DURATION|off  # bare 404, 405, 410, 414, 501; default 5m
//	    origin_timeout DURATION
//	    peer_timeout   DURATION
//	    download_timeout DURATION    # default 10m
//	    write_idle_timeout DURATION|off # default 30s; off: the server's own
//	    max_downloads  N [PER_ORIGIN [PER_CLIENT]] # default 256 32 16
//	    max_client_downloads N       # per client over all origins; default max_downloads / 8
//	    max_address_downloads N      # per origin address, any name or port; default max_downloads / 4
//	    client_prefix  V4LEN V6LEN   # what a client is, for those bounds; default 32 48
//	    download_wait  DURATION      # default 10s
//	    peer_address   IP:PORT
//	    blacklist      FILE [POLL]
//	    fleet_blacklist KEY_FILE {   # the fleet-wide signed list
//	        from  URL...             # where to fetch it; repeatable
//	        poll  DURATION           # default 1m
//	        state FILE               # the last good list; default in Caddy's data directory
//	    }
//	    rate_limit     PER_SECOND BURST | off
//	    bandwidth_budget SIZE [per DURATION]
//	    bandwidth_share fair|node    # default fair: max-min among origins
//	    load_requests  N             # requests in flight that count as full; default 1024
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.Zone = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		o := optionArgs{d: d, name: d.Val(), args: d.RemainingArgs()}
		parse, ok := proxyOptions[o.name]
		if !ok {
			return d.Errf("unknown coral_proxy option %q", o.name)
		}
		if err := parse(h, o); err != nil {
			return err
		}
	}
	return nil
}

// optionArgs is one option of a Caddyfile block and its arguments, with
// the checks the options share.
type optionArgs struct {
	d    *caddyfile.Dispenser
	name string
	args []string
}

func (o optionArgs) one() (string, error) {
	if len(o.args) != 1 {
		return "", o.d.Errf("%s takes one argument", o.name)
	}
	return o.args[0], nil
}

// duration is the option's one argument as a non-negative duration.
func (o optionArgs) duration() (caddy.Duration, error) {
	v, err := o.one()
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	switch {
	case err != nil:
		return 0, o.d.Errf("%s: %q is not a duration such as 30s or 12h", o.name, v)
	case dur < 0:
		return 0, o.d.Errf("%s: %q is negative: want 0 or more", o.name, v)
	}
	return caddy.Duration(dur), nil
}

// size parses a byte size; example goes into the error ("1GiB").
func (o optionArgs) size(v, example string) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<62 {
		return 0, o.d.Errf("%s: %q is not a size such as %s", o.name, v, example)
	}
	return int64(n), nil
}

// positive parses a count of at least 1; what names it in the error.
func (o optionArgs) positive(v, what string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, o.d.Errf("%s: %s%q is not a positive number", o.name, what, v)
	}
	return n, nil
}

// positiveDuration parses a duration above 0.
func (o optionArgs) positiveDuration(v string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	switch {
	case err != nil:
		return 0, o.d.Errf("%s: %q is not a duration such as 30s or 12h", o.name, v)
	case dur < 0:
		return 0, o.d.Errf("%s: %q is negative: want more than 0", o.name, v)
	case dur == 0:
		return 0, o.d.Errf("%s: %q: want more than 0", o.name, v)
	}
	return caddy.Duration(dur), nil
}

// prefixes checks a list of address prefixes.
func (o optionArgs) prefixes() ([]string, error) {
	if len(o.args) == 0 {
		return nil, o.d.Errf("%s needs at least one prefix", o.name)
	}
	for _, a := range o.args {
		if _, err := parsePrefix(a); err != nil {
			return nil, o.d.Errf("%s: %q is not a prefix or address", o.name, a)
		}
	}
	return o.args, nil
}

// durationOption parses one duration into the field field names.
func durationOption(field func(*Handler) *caddy.Duration) func(*Handler, optionArgs) error {
	return func(h *Handler, o optionArgs) (err error) {
		*field(h), err = o.duration()
		return err
	}
}

// positiveOption parses one positive number into field.
func positiveOption(field func(*Handler) *int) func(*Handler, optionArgs) error {
	return func(h *Handler, o optionArgs) error {
		v, err := o.one()
		if err == nil {
			*field(h), err = o.positive(v, "")
		}
		return err
	}
}

// ttlOption parses one duration into an optional field (nil: the
// default).
func ttlOption(field func(*Handler) **caddy.Duration) func(*Handler, optionArgs) error {
	return func(h *Handler, o optionArgs) error {
		v, err := o.duration()
		*field(h) = &v
		return err
	}
}

// prefixOption adds address prefixes to the list field names.
func prefixOption(field func(*Handler) *[]string) func(*Handler, optionArgs) error {
	return func(h *Handler, o optionArgs) error {
		p, err := o.prefixes()
		*field(h) = append(*field(h), p...)
		return err
	}
}

// proxyOptions parse the options of the coral_proxy block, by name.
var proxyOptions = map[string]func(h *Handler, o optionArgs) error{
	"cache_dir": func(h *Handler, o optionArgs) (err error) {
		h.CacheDir, err = o.one()
		return err
	},
	"cache_size": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		if err == nil {
			h.CacheSize, err = o.size(v, "1GiB")
		}
		return err
	},
	"max_object_size": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		if err == nil {
			h.MaxObjectSize, err = o.size(v, "64MiB")
		}
		return err
	},
	"slice_size": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		switch {
		case err != nil:
		case v == "off":
			h.SliceSize = -1
		default:
			h.SliceSize, err = o.size(v, "4MiB (1MiB-8MiB, or off)")
			if err == nil && (h.SliceSize < proxy.MinSliceSize || h.SliceSize > proxy.MaxSliceSize) {
				err = o.d.Errf("slice_size: %q is not within 1MiB-8MiB (or off)", v)
			}
		}
		return err
	},
	"memory_cache_size": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		switch {
		case err != nil:
		case v == "off":
			h.MemoryCacheSize = -1
		default:
			h.MemoryCacheSize, err = o.size(v, "16MiB (or off)")
		}
		return err
	},
	"max_objects":           positiveOption(func(h *Handler) *int { return &h.MaxObjects }),
	"max_client_downloads":  positiveOption(func(h *Handler) *int { return &h.MaxClientDownloads }),
	"max_address_downloads": positiveOption(func(h *Handler) *int { return &h.MaxDownloadsPerAddress }),
	"load_requests":         positiveOption(func(h *Handler) *int { return &h.LoadRequests }),
	"forward_fields": func(h *Handler, o optionArgs) error {
		if len(o.args) == 0 {
			return o.d.Errf("forward_fields needs at least one field name")
		}
		if _, err := proxy.ForwardFields(o.args); err != nil {
			return o.d.Err(err.Error())
		}
		h.ForwardFields = append(h.ForwardFields, o.args...)
		return nil
	},
	"allow_origins":    prefixOption(func(h *Handler) *[]string { return &h.AllowOrigins }),
	"allow_peers":      prefixOption(func(h *Handler) *[]string { return &h.AllowPeers }),
	"download_timeout": durationOption(func(h *Handler) *caddy.Duration { return &h.DownloadTimeout }),
	"download_wait":    durationOption(func(h *Handler) *caddy.Duration { return &h.DownloadWait }),
	"max_downloads": func(h *Handler, o optionArgs) (err error) {
		if len(o.args) < 1 || len(o.args) > 3 {
			return o.d.Errf("max_downloads takes N [PER_ORIGIN [PER_CLIENT]]")
		}
		if h.MaxDownloads, err = o.positive(o.args[0], ""); err != nil || len(o.args) == 1 {
			return err
		}
		if h.MaxDownloadsPerOrigin, err = o.positive(o.args[1], "per origin "); err != nil || len(o.args) == 2 {
			return err
		}
		h.MaxDownloadsPerClient, err = o.positive(o.args[2], "per client ")
		return err
	},
	"client_prefix": func(h *Handler, o optionArgs) error {
		if len(o.args) != 2 {
			return o.d.Errf("client_prefix takes V4LEN V6LEN (e.g. 32 48, or 24 56)")
		}
		v4, err4 := strconv.Atoi(o.args[0])
		v6, err6 := strconv.Atoi(o.args[1])
		if err4 != nil || v4 < 8 || v4 > 32 {
			return o.d.Errf("client_prefix: IPv4 length %q: want 8-32", o.args[0])
		}
		if err6 != nil || v6 < 32 || v6 > 128 {
			return o.d.Errf("client_prefix: IPv6 length %q: want 32-128", o.args[1])
		}
		h.ClientPrefixV4, h.ClientPrefixV6 = v4, v6
		return nil
	},
	"https_redirect": func(h *Handler, o optionArgs) (err error) {
		if len(o.args) > 1 {
			return o.d.Errf("https_redirect takes at most a port")
		}
		h.HTTPSRedirect = true
		if len(o.args) == 1 {
			p, err := strconv.ParseUint(o.args[0], 10, 16)
			if err != nil || p == 0 || o.args[0][0] == '0' {
				return o.d.Errf("https_redirect: port %q: want 1-65535", o.args[0])
			}
			h.HTTPSPort = int(p)
		}
		return nil
	},
	"origin_scheme": func(h *Handler, o optionArgs) (err error) {
		if h.OriginScheme, err = o.one(); err != nil {
			return err
		}
		switch h.OriginScheme {
		case "http", "https", "auto":
			return nil
		}
		return o.d.Errf("origin_scheme: %q; want http, https or auto", h.OriginScheme)
	},
	"default_ttl": ttlOption(func(h *Handler) **caddy.Duration { return &h.DefaultTTL }),
	"min_ttl":     ttlOption(func(h *Handler) **caddy.Duration { return &h.MinTTL }),
	"negative_ttl": func(h *Handler, o optionArgs) error {
		if len(o.args) == 1 && o.args[0] == "off" {
			off := caddy.Duration(-1)
			h.NegativeTTL = &off
			return nil
		}
		return ttlOption(func(h *Handler) **caddy.Duration { return &h.NegativeTTL })(h, o)
	},
	"origin_timeout": durationOption(func(h *Handler) *caddy.Duration { return &h.OriginTimeout }),
	"peer_timeout":   durationOption(func(h *Handler) *caddy.Duration { return &h.PeerTimeout }),
	"write_idle_timeout": func(h *Handler, o optionArgs) (err error) {
		if len(o.args) == 1 && o.args[0] == "off" {
			h.WriteIdleTimeout = -1
			return nil
		}
		h.WriteIdleTimeout, err = o.duration()
		return err
	},
	"blacklist": func(h *Handler, o optionArgs) (err error) {
		if len(o.args) < 1 || len(o.args) > 2 {
			return o.d.Errf("blacklist takes a file and optionally how often to check it")
		}
		h.Blacklist = o.args[0]
		// Like the key file's: a changed list is a changed configuration
		// to `caddy reload` (the poll would pick it up anyway).
		h.BlacklistSHA256 = fileSHA256(h.Blacklist)
		if len(o.args) == 2 {
			h.BlacklistPoll, err = o.positiveDuration(o.args[1])
		}
		return err
	},
	"fleet_blacklist": parseFleetBlacklist,
	"rate_limit": func(h *Handler, o optionArgs) error {
		if len(o.args) == 1 && o.args[0] == "off" {
			h.RateLimit = -1
			return nil
		}
		if len(o.args) != 2 {
			return o.d.Errf("rate_limit takes REQUESTS_PER_SECOND BURST, or off")
		}
		rate, rerr := strconv.ParseFloat(o.args[0], 64)
		burst, berr := strconv.Atoi(o.args[1])
		if rerr != nil || rate <= 0 || berr != nil || burst < 1 {
			return o.d.Errf("rate_limit: want a positive rate and a burst of at least 1, got %q %q", o.args[0], o.args[1])
		}
		h.RateLimit, h.RateBurst = rate, burst
		return nil
	},
	"bandwidth_budget": func(h *Handler, o optionArgs) (err error) {
		if len(o.args) != 1 && !(len(o.args) == 3 && o.args[1] == "per") {
			return o.d.Errf("bandwidth_budget takes SIZE [per DURATION]")
		}
		if h.BandwidthBudget, err = o.size(o.args[0], "100GiB"); err != nil || len(o.args) == 1 {
			return err
		}
		h.BandwidthWindow, err = o.positiveDuration(o.args[2])
		return err
	},
	"bandwidth_share": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		if err != nil {
			return err
		}
		if v != bandwidthShareFair && v != bandwidthShareNode {
			return o.d.Errf("bandwidth_share: want fair or node, got %q", v)
		}
		h.BandwidthShare = v
		return nil
	},
	"peer_address": func(h *Handler, o optionArgs) error {
		v, err := o.one()
		if err != nil {
			return err
		}
		if _, err := netip.ParseAddrPort(v); err != nil {
			return o.d.Errf("peer_address: %q is not IP:PORT", v)
		}
		h.PeerAddress = v
		return nil
	},
}

// parseFleetBlacklist reads fleet_blacklist and its block:
//
//	fleet_blacklist KEY_FILE {
//	    from  URL...
//	    poll  DURATION
//	    state FILE
//	}
func parseFleetBlacklist(h *Handler, o optionArgs) error {
	if h.FleetBlacklist != nil {
		return o.d.Errf("fleet_blacklist may appear only once")
	}
	if len(o.args) != 1 {
		return o.d.Errf("fleet_blacklist takes the publisher key file, then a block with from, poll and state")
	}
	fb := &FleetBlacklist{KeyFile: o.args[0], KeySHA256: fileSHA256(o.args[0])}
	for nesting := o.d.Nesting(); o.d.NextBlock(nesting); {
		prop := o.d.Val()
		sub := optionArgs{d: o.d, name: "fleet_blacklist " + prop, args: o.d.RemainingArgs()}
		switch prop {
		case "from":
			if len(sub.args) == 0 {
				return o.d.Errf("%s takes one or more http:// or https:// URLs", sub.name)
			}
			for _, u := range sub.args {
				if err := abuse.CheckSourceURL(u); err != nil {
					return o.d.Errf("%s: %q: want an http:// or https:// URL", sub.name, u)
				}
			}
			fb.Sources = append(fb.Sources, sub.args...)
		case "poll":
			v, err := sub.one()
			if err == nil {
				fb.Poll, err = sub.positiveDuration(v)
			}
			if err != nil {
				return err
			}
		case "state":
			v, err := sub.one()
			if err != nil {
				return err
			}
			fb.StateFile = v
		default:
			return o.d.Errf("unknown fleet_blacklist option %q (from, poll, state)", prop)
		}
	}
	h.FleetBlacklist = fb
	return nil
}

// parseStatusPageCaddyfile reads the coral_status directive.
func parseStatusPageCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var s StatusPage
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return &s, err
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	coral_status [<matcher>] {
//	    recent N       # objects and fetches listed; default 20, at most 64
//	    show_queries   # URLs with their query strings (default: cut off)
//	}
func (s *StatusPage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch prop := d.Val(); prop {
		case "recent":
			args := d.RemainingArgs()
			if len(args) != 1 {
				return d.Errf("recent takes one number")
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 1 || n > maxStatusRecent {
				return d.Errf("recent: %q; want a number 1..%d", args[0], maxStatusRecent)
			}
			s.Recent = n
		case "show_queries":
			if d.NextArg() {
				return d.ArgErr()
			}
			s.ShowQueries = true
		default:
			return d.Errf("unknown coral_status option %q", prop)
		}
	}
	return nil
}
