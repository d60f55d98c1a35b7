package host

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

var (
	loopback = netip.MustParseAddrPort("127.0.40.1:4000")
	public   = netip.MustParseAddrPort("192.0.2.1:4000")
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		field string
		want  string
	}{
		{"no listen", Options{}, "Listen", "listen: want IP:PORT"},
		{"bad bootstrap", Options{Listen: loopback, Bootstrap: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:4000")}}, "Bootstrap", "bootstrap 0.0.0.0:4000"},
		{"bootstrap port 0", Options{Listen: loopback, Bootstrap: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}}, "Bootstrap", "want a specific IP:PORT"},
		{"no key off loopback", Options{Listen: public}, "KeyFile", keyRequired},
		{"no key, advertising off loopback", Options{Listen: loopback, Advertise: public}, "KeyFile", "key is required to advertise 192.0.2.1:4000"},
		{"unspecified listen, no advertise", Options{Listen: netip.MustParseAddrPort("0.0.0.0:4000"), KeyFile: "k"}, "Advertise", "advertise is required"},
		{"bad advertise", Options{Listen: loopback, Advertise: netip.MustParseAddrPort("127.0.0.1:0")}, "Advertise", "port 0"},
		{"levels not decreasing", Options{Listen: loopback, Levels: []time.Duration{20 * time.Millisecond, 60 * time.Millisecond}}, "Levels", "must be below"},
		{"too many levels", Options{Listen: loopback, Levels: make([]time.Duration, coraldht.MaxLevels)}, "Levels", "at most"},
		{"pin above the levels", Options{Listen: loopback, Pins: map[int]string{3: "x"}}, "Pins", "levels 1..2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (%#v), want field %s and a message containing %q", err, fe, tc.field, tc.want)
			}
		})
	}
	for _, o := range []Options{
		{Listen: loopback},
		{Listen: public, KeyFile: "/etc/coral/network.key", Advertise: netip.MustParseAddrPort("198.51.100.1:4000")},
		{Listen: netip.MustParseAddrPort("0.0.0.0:4000"), Advertise: public, KeyFile: "k"},
		{Listen: loopback, Levels: []time.Duration{50 * time.Millisecond}, Pins: map[int]string{1: "site"}},
	} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestKeyRequiredText: the message CoreDNS has always printed.
func TestKeyRequiredText(t *testing.T) {
	if !strings.HasPrefix(keyRequired, "key is required unless the node listens on loopback: the network key authenticates every DSHT datagram (") ||
		!strings.Contains(keyRequired, coraldht.KeyHelp) {
		t.Errorf("keyRequired = %q", keyRequired)
	}
}

// TestSettingsIdentity: what counts as a change of settings.
func TestSettingsIdentity(t *testing.T) {
	key := writeKey(t)
	base := Options{Listen: loopback, Services: coraldht.ServiceDNS}
	same := func(a, b Options) bool {
		t.Helper()
		pa, err := a.plan()
		if err != nil {
			t.Fatal(err)
		}
		pb, err := b.plan()
		if err != nil {
			t.Fatal(err)
		}
		return pa.st.equal(pb.st)
	}
	with := func(f func(*Options)) Options {
		o := base
		f(&o)
		return o
	}
	if !same(base, with(func(o *Options) { o.Levels = []time.Duration{60 * time.Millisecond, 20 * time.Millisecond} })) {
		t.Error("the default levels spelt out differ from none")
	}
	if !same(base, with(func(o *Options) { o.Pins = map[int]string{} })) {
		t.Error("empty pins differ from none")
	}
	if !same(base, with(func(o *Options) { o.Logger = nil })) {
		t.Error("the logger counts as a setting")
	}
	for name, o := range map[string]Options{
		"advertise": with(func(o *Options) { o.Advertise = netip.MustParseAddrPort("127.0.40.9:4000") }),
		"bootstrap": with(func(o *Options) { o.Bootstrap = []netip.AddrPort{netip.MustParseAddrPort("127.0.40.9:4000")} }),
		"key file":  with(func(o *Options) { o.KeyFile = key }),
		"levels":    with(func(o *Options) { o.Levels = []time.Duration{50 * time.Millisecond} }),
		"pins":      with(func(o *Options) { o.Pins = map[int]string{1: "site"} }),
		"services":  with(func(o *Options) { o.Services = coraldht.ServiceHTTP }),
	} {
		if same(base, o) {
			t.Errorf("a change of %s is not a change of settings", name)
		}
	}
}
