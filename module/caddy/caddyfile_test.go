package coralcaddy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"
	"go.uber.org/zap"

	"github.com/coralcdn/coral/module/caddy/proxy"
)

// TestCaddyfileAdapt compares `caddy adapt` output with the golden files in
// testdata/adapt: a Caddyfile, a line of dashes, the expected JSON.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in, want, ok := strings.Cut(string(b), "----------")
		if !ok {
			t.Fatalf("%s: no ---------- separator", f)
		}
		if !caddytest.CompareAdapt(t, f, in, "caddyfile", strings.TrimSpace(want)) {
			t.Errorf("%s: adapted JSON differs", f)
		}
	}
}

// TestCaddyfileWriteIdleTimeout: write_idle_timeout takes a duration, or
// off (negative: the server's own setting).
func TestCaddyfileWriteIdleTimeout(t *testing.T) {
	for in, want := range map[string]caddy.Duration{"10s": caddy.Duration(10 * time.Second), "off": -1} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n write_idle_timeout " + in + "\n}")); err != nil || h.WriteIdleTimeout != want {
			t.Errorf("write_idle_timeout %s: %v, %v; want %v", in, h.WriteIdleTimeout, err, want)
		}
	}
}

// TestCaddyfileFleetBlacklist: fleet_blacklist's block into the JSON
// fields, from repeatable, and an error that names the file and line.
func TestCaddyfileFleetBlacklist(t *testing.T) {
	var h Handler
	in := "coral_proxy nyud.test {\n fleet_blacklist /etc/coral/blacklist.pub {\n  from https://lists.example/coral.signed\n  from http://10.0.0.2:8081/ http://10.0.0.3:8081/\n  poll 30s\n  state /var/lib/coral/list\n }\n rate_limit off\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
		t.Fatal(err)
	}
	fb := h.FleetBlacklist
	if fb == nil || fb.KeyFile != "/etc/coral/blacklist.pub" || len(fb.Sources) != 3 || fb.Poll != caddy.Duration(30*time.Second) ||
		fb.StateFile != "/var/lib/coral/list" || h.RateLimit != -1 {
		t.Fatalf("parsed %+v (rate %v)", fb, h.RateLimit)
	}
	var bad Handler
	err := bad.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  poll 1m\n  from nowhere\n }\n}"))
	if err == nil || !strings.Contains(err.Error(), "Testfile:4") {
		t.Errorf("error %v, want one naming Testfile:4", err)
	}
}

// TestCaddyfileMemoryCacheSize: memory_cache_size takes a size, or off
// (-1: no bodies in memory).
func TestCaddyfileMemoryCacheSize(t *testing.T) {
	for in, want := range map[string]int64{"4MiB": 4 << 20, "off": -1} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n memory_cache_size " + in + "\n}")); err != nil || h.MemoryCacheSize != want {
			t.Errorf("memory_cache_size %s: %v, %v; want %v", in, h.MemoryCacheSize, err, want)
		}
	}
}

// TestCaddyfileClientBounds: the per-client and per-address download
// bounds and what a client is, into the JSON the proxy's Config is made
// from; unset, the Config's shares of max_downloads.
func TestCaddyfileClientBounds(t *testing.T) {
	var h Handler
	in := "coral_proxy nyud.test {\n max_downloads 64\n max_client_downloads 6\n max_address_downloads 20\n client_prefix 24 56\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
		t.Fatal(err)
	}
	if h.MaxClientDownloads != 6 || h.MaxDownloadsPerAddress != 20 || h.ClientPrefixV4 != 24 || h.ClientPrefixV6 != 56 {
		t.Errorf("parsed %d %d /%d /%d, want 6 20 /24 /56", h.MaxClientDownloads, h.MaxDownloadsPerAddress, h.ClientPrefixV4, h.ClientPrefixV6)
	}
}

// TestCaddyfileBandwidthShare: bandwidth_share fair or node, fair by
// default, and the abuse controls it makes: a budget with shares or one
// counter for the node.
func TestCaddyfileBandwidthShare(t *testing.T) {
	for _, tc := range []struct {
		lines string
		fair  bool
	}{
		{"bandwidth_budget 1GiB", true},
		{"bandwidth_budget 1GiB\n bandwidth_share fair", true},
		{"bandwidth_budget 1GiB per 1h\n bandwidth_share node", false},
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n " + tc.lines + "\n}")); err != nil {
			t.Fatalf("%q: %v", tc.lines, err)
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("%q: %v", tc.lines, err)
		}
		h.logger = zap.NewNop()
		if err := h.provisionAbuse(); err != nil {
			t.Fatal(err)
		}
		if got := h.abuse.Budget.Fair(); got != tc.fair {
			t.Errorf("%q: fair budget %v, want %v", tc.lines, got, tc.fair)
		}
	}
	if err := (&Handler{Zone: "nyud.test", BandwidthShare: "half"}).Validate(); err == nil || !strings.Contains(err.Error(), "bandwidth_share") {
		t.Errorf("JSON bandwidth_share half: %v", err)
	}
}

// TestCaddyfileNegativeTTL: negative_ttl takes a duration or off, and
// the policy keeps bare errors that long, not at all when off, nor in
// strict mode (default_ttl 0) unless negative_ttl says so.
func TestCaddyfileNegativeTTL(t *testing.T) {
	for _, tc := range []struct {
		lines string
		want  time.Duration
	}{
		{"", 5 * time.Minute},
		{"negative_ttl 90s", 90 * time.Second},
		{"negative_ttl off", -1},
		{"negative_ttl 0", -1},
		{"default_ttl 0", -1},
		{"default_ttl 0\n negative_ttl 1m", time.Minute},
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n " + tc.lines + "\n}")); err != nil {
			t.Fatalf("%q: %v", tc.lines, err)
		}
		if got := h.policy().NegativeTTL; got != tc.want {
			t.Errorf("%q: NegativeTTL %v, want %v", tc.lines, got, tc.want)
		}
	}
}

func TestCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{
		{"no zone", "coral_proxy", "wrong argument count"},
		{"two zones", "coral_proxy a.test b.test", "wrong argument count"},
		{"unknown option", "coral_proxy nyud.test {\n colour blue\n}", `unknown coral_proxy option "colour"`},
		{"bad size", "coral_proxy nyud.test {\n cache_size lots\n}", "not a size"},
		{"zero size", "coral_proxy nyud.test {\n cache_size 0\n}", "not a size"},
		{"bad memory size", "coral_proxy nyud.test {\n memory_cache_size some\n}", "not a size"},
		{"bad prefix", "coral_proxy nyud.test {\n allow_origins 10.0.0.0/33\n}", "not a prefix"},
		{"no prefix", "coral_proxy nyud.test {\n allow_origins\n}", "at least one"},
		{"bad scheme", "coral_proxy nyud.test {\n origin_scheme ftp\n}", "want http, https or auto"},
		{"bad duration", "coral_proxy nyud.test {\n min_ttl soon\n}", "not a duration"},
		{"bad peer", "coral_proxy nyud.test {\n peer_address here\n}", "not IP:PORT"},
		{"two args", "coral_proxy nyud.test {\n cache_dir a b\n}", "takes one argument"},
		{"bad object size", "coral_proxy nyud.test {\n max_object_size huge\n}", "not a size"},
		{"bad max objects", "coral_proxy nyud.test {\n max_objects -1\n}", "not a positive number"},
		{"bad peers", "coral_proxy nyud.test {\n allow_peers nowhere\n}", "not a prefix"},
		{"no downloads", "coral_proxy nyud.test {\n max_downloads 0\n}", "not a positive number"},
		{"downloads args", "coral_proxy nyud.test {\n max_downloads 1 2 3 4\n}", "N [PER_ORIGIN [PER_CLIENT]]"},
		{"bad per client", "coral_proxy nyud.test {\n max_downloads 10 5 0\n}", "per client"},
		{"bad per origin", "coral_proxy nyud.test {\n max_downloads 10 x\n}", "per origin"},
		{"bad wait", "coral_proxy nyud.test {\n download_wait later\n}", "not a duration"},
		{"bad client downloads", "coral_proxy nyud.test {\n max_client_downloads 0\n}", "not a positive number"},
		{"bad address downloads", "coral_proxy nyud.test {\n max_address_downloads -3\n}", "not a positive number"},
		{"client prefix args", "coral_proxy nyud.test {\n client_prefix 24\n}", "V4LEN V6LEN"},
		{"client prefix v4", "coral_proxy nyud.test {\n client_prefix 33 48\n}", "want 8-32"},
		{"client prefix v6", "coral_proxy nyud.test {\n client_prefix 24 16\n}", "want 32-128"},
		{"cookie forwarded", "coral_proxy nyud.test {\n forward_fields Cookie\n}", "never forwarded"},
		{"no fields", "coral_proxy nyud.test {\n forward_fields\n}", "at least one"},
		{"bad write idle timeout", "coral_proxy nyud.test {\n write_idle_timeout never\n}", "not a duration"},
		// A negative duration is a duration: the message says what is
		// wrong with it (issue 37).
		{"negative duration", "coral_proxy nyud.test {\n default_ttl -5s\n}", `default_ttl: "-5s" is negative: want 0 or more`},
		{"negative poll", "coral_proxy nyud.test {\n blacklist /dev/null -1s\n}", `"-1s" is negative: want more than 0`},
		{"bad bandwidth share", "coral_proxy nyud.test {\n bandwidth_share even\n}", `bandwidth_share: want fair or node, got "even"`},
		{"bandwidth share args", "coral_proxy nyud.test {\n bandwidth_share fair node\n}", "takes one argument"},
		{"fleet no key", "coral_proxy nyud.test {\n fleet_blacklist {\n  from http://a/\n }\n}", "takes the publisher key file"},
		{"fleet bad from", "coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  from ftp://a/list\n }\n}", `fleet_blacklist from: "ftp://a/list": want an http:// or https:// URL`},
		{"fleet no from", "coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  from\n }\n}", "one or more"},
		{"fleet bad poll", "coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  poll 0s\n }\n}", `fleet_blacklist poll: "0s": want more than 0`},
		{"fleet unknown", "coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  colour blue\n }\n}", `unknown fleet_blacklist option "colour"`},
		{"fleet twice", "coral_proxy nyud.test {\n fleet_blacklist a.pub\n fleet_blacklist b.pub\n}", "only once"},
		{"fleet state args", "coral_proxy nyud.test {\n fleet_blacklist k.pub {\n  state a b\n }\n}", "takes one argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, input, want string
	}{
		{"no listen", "coral {\n}", "listen IP:PORT is required"},
		{"levels up", "coral {\n listen 127.0.0.2:4000\n levels 20ms 60ms\n}", "must decrease"},
		{"level 0 pin", "coral {\n listen 127.0.0.2:4000\n cluster 0 x\n}", "must be a number 1..n"},
		{"pin twice", "coral {\n listen 127.0.0.2:4000\n cluster 1 x\n cluster 1 y\n}", "given twice"},
		{"unknown", "coral {\n listen 127.0.0.2:4000\n colour blue\n}", `unknown coral option "colour"`},
		{"empty bootstrap", "coral {\n listen 127.0.0.2:4000\n bootstrap\n}", "at least one"},
		// The same checks and messages as CoreDNS's (coraldht/host reads
		// the block for both), at adapt time.
		{"too many levels", "coral {\n listen 127.0.0.2:4000\n levels 8ms 7ms 6ms 5ms 4ms 3ms 2ms 1ms\n}", "levels takes 1..7 RTT thresholds (levels 1..n), got 8"},
		{"pin above the levels", "coral {\n listen 127.0.0.2:4000\n cluster 3 x\n}", "cluster level 3: this configuration has levels 1..2"},
		{"no key off loopback", "coral {\n listen 192.0.2.1:4000\n}", "key is required unless the node listens on loopback"},
		{"bad advertise", "coral {\n listen 127.0.0.2:4000\n advertise 0.0.0.0:4000\n}", `advertise "0.0.0.0:4000": want a specific IP:PORT`},
	} {
		t.Run("global "+tc.name, func(t *testing.T) {
			_, err := parseGlobalCoral(caddyfile.NewTestDispenser(tc.input), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCaddyfileSliceSize: slice_size takes a size of 1MiB to 8MiB, or off
// (-1: every object whole), into the proxy's Config (0: the default).
func TestCaddyfileSliceSize(t *testing.T) {
	for in, want := range map[string]int64{"1MiB": 1 << 20, "8MiB": 8 << 20, "off": -1} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n slice_size " + in + "\n}")); err != nil || h.SliceSize != want {
			t.Errorf("slice_size %s: %v, %v; want %v", in, h.SliceSize, err, want)
		}
	}
	for _, bad := range []string{"512KiB", "16MiB", "big"} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("coral_proxy nyud.test {\n slice_size " + bad + "\n}")); err == nil {
			t.Errorf("slice_size %s accepted", bad)
		}
	}
	for size, want := range map[int64]int64{0: proxy.DefaultSliceSize, -1: 0, 2 << 20: 2 << 20} {
		h := Handler{Zone: "nyud.test", SliceSize: size, logger: zap.NewNop()}
		h.setDefaults()
		c, err := h.proxyConfig()
		if err != nil || c.SliceSize != want {
			t.Errorf("SliceSize %d: Config.SliceSize %d (%v), want %d", size, c.SliceSize, err, want)
		}
	}
}
