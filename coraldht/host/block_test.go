package host

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// lines is a Dispenser over a block written one property per line, as both
// servers' lexers deliver it.
type lines struct {
	rows [][]string
	at   int  // current row, -1 before the first
	read bool // the current row's arguments were consumed
}

func newLines(block string) *lines {
	l := &lines{at: -1}
	for row := range strings.SplitSeq(block, "\n") {
		if f := strings.Fields(row); len(f) > 0 {
			l.rows = append(l.rows, f)
		}
	}
	return l
}

func (l *lines) NextBlock() bool {
	if l.at+1 >= len(l.rows) {
		return false
	}
	l.at++
	l.read = false
	return true
}

func (l *lines) Val() string { return l.rows[l.at][0] }

func (l *lines) RemainingArgs() []string {
	l.read = true
	return l.rows[l.at][1:]
}

func (l *lines) Errf(format string, args ...any) error {
	return fmt.Errorf("line %d: "+format, append([]any{l.at + 1}, args...)...)
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(newLines(`
		listen 127.0.41.1:4000
		advertise 127.0.41.2:4001
		bootstrap 127.0.41.3:4000
		bootstrap 127.0.41.4:4000 127.0.41.5:4000
		key_file /etc/coral/network.key
		levels 100ms 30ms 10ms
		cluster 2 fra
		cluster 3 fra1`))
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := Options{
		Listen:    ap("127.0.41.1:4000"),
		Advertise: ap("127.0.41.2:4001"),
		Bootstrap: []netip.AddrPort{ap("127.0.41.3:4000"), ap("127.0.41.4:4000"), ap("127.0.41.5:4000")},
		KeyFile:   "/etc/coral/network.key",
		Levels:    []time.Duration{100 * time.Millisecond, 30 * time.Millisecond, 10 * time.Millisecond},
		Pins:      map[int]string{2: "fra", 3: "fra1"},
	}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("options\n got %+v\nwant %+v", o, want)
	}

	o, err = ParseOptions(newLines("listen [::ffff:127.0.41.1]:4000\nlevels 50ms\nlevels 60ms 20ms"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Listen != ap("127.0.41.1:4000") || !slices.Equal(o.Levels, []time.Duration{60 * time.Millisecond, 20 * time.Millisecond}) {
		t.Fatalf("an IPv4-mapped listen is IPv4 and a later levels line replaces an earlier one: %+v", o)
	}
	o, err = ParseOptions(newLines("listen 127.0.41.1:4000\ncluster 2 x"))
	if err != nil || !maps.Equal(o.Pins, map[int]string{2: "x"}) {
		t.Fatalf("a pin at level 2 of the default two levels: %+v, %v", o, err)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	const listen = "listen 127.0.41.1:4000\n"
	for _, tc := range []struct{ name, block, want string }{
		{"no listen", "", "line 0: listen IP:PORT is required: the UDP address of this server's Coral DSHT node"},
		{"listen args", "listen", "line 1: listen takes 1 argument(s), got 0"},
		{"listen two", "listen 127.0.41.1:4000 127.0.41.2:4000", "listen takes 1 argument(s), got 2"},
		{"listen bad", "listen nowhere", `line 1: listen "nowhere": want IP:PORT (`},
		{"advertise args", listen + "advertise", "line 2: advertise takes 1 argument(s), got 0"},
		{"advertise unspecified", listen + "advertise 0.0.0.0:4000", `advertise "0.0.0.0:4000": want a specific IP:PORT`},
		{"advertise port 0", listen + "advertise 127.0.41.2:0", `advertise "127.0.41.2:0": want a specific IP:PORT`},
		{"advertise off loopback without key", listen + "advertise 192.0.2.1:4000", "key is required to advertise 192.0.2.1:4000"},
		{"bootstrap empty", listen + "bootstrap", "line 2: bootstrap needs at least one IP:PORT"},
		{"bootstrap no port", listen + "bootstrap 127.0.41.3", `bootstrap "127.0.41.3": want a specific IP:PORT`},
		{"bootstrap unspecified", listen + "bootstrap 127.0.41.3:4000 [::]:4000", `bootstrap "[::]:4000": want a specific IP:PORT`},
		{"key_file args", listen + "key_file a b", "key_file takes a key file (key PRIMARY_FILE [ACCEPTED_FILE...])"},
		{"key none", listen + "key", "key takes a key file"},
		{"key twice", listen + "key a\nkey_file b", "line 3: key_file: the network keys are given once"},
		{"key_file missing off loopback", "listen 192.0.2.1:4000", "key is required unless the node listens on loopback"},
		{"levels none", listen + "levels", "levels takes 1..7 RTT thresholds (levels 1..n), got 0"},
		{"levels too many", listen + "levels 8ms 7ms 6ms 5ms 4ms 3ms 2ms 1ms", "levels takes 1..7 RTT thresholds (levels 1..n), got 8"},
		{"levels bad", listen + "levels fast", `levels "fast": want a positive duration such as 20ms or 1h`},
		{"levels zero", listen + "levels 0s", `levels "0s": want a positive duration`},
		{"levels increasing", listen + "levels 20ms 60ms", "levels must decrease: level 2's threshold 60ms is not below level 1's 20ms"},
		{"levels equal", listen + "levels 20ms 20ms", "levels must decrease"},
		{"cluster args", listen + "cluster 1", "cluster takes 2 argument(s), got 1"},
		{"cluster level 0", listen + "cluster 0 x", `cluster "0": the level must be a number 1..n (level 0 is the global cluster)`},
		{"cluster level word", listen + "cluster one x", `cluster "one": the level must be a number`},
		{"cluster twice", listen + "cluster 1 x\ncluster 1 y", "line 3: cluster for level 1 given twice"},
		{"cluster above the levels", listen + "levels 50ms\ncluster 2 x", "cluster level 2: this configuration has levels 1..1"},
		{"cluster above the default levels", listen + "cluster 3 x", "cluster level 3: this configuration has levels 1..2"},
		{"unknown", listen + "colour blue", `line 2: unknown coral option "colour"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOptions(newLines(tc.block))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !reflect.DeepEqual(o, Options{}) {
				t.Fatalf("options %+v returned with the error", o)
			}
		})
	}
}

// TestPropertyLeavesOtherLines: a line that is not a node option is left
// to the server, arguments and all.
func TestPropertyLeavesOtherLines(t *testing.T) {
	d := newLines("listen 127.0.41.1:4000\nprobe icmp\nlevels 30ms")
	var p OptionsParser
	var others []string
	for d.NextBlock() {
		known, err := p.Property(d)
		if err != nil {
			t.Fatal(err)
		}
		if known != d.read {
			t.Fatalf("line %q: known %v, but arguments consumed %v", d.Val(), known, d.read)
		}
		if !known {
			others = append(others, strings.Join(d.RemainingArgs(), " "))
		}
	}
	if !slices.Equal(others, []string{"icmp"}) {
		t.Fatalf("lines left to the server: %q", others)
	}
	o, err := p.Finish(d)
	if err != nil || !slices.Equal(o.Levels, []time.Duration{30 * time.Millisecond}) {
		t.Fatalf("Finish = %+v, %v", o, err)
	}
}

// TestParseKey: `key PRIMARY [ACCEPTED...]` names the primary and the
// accepted key files.
func TestParseKey(t *testing.T) {
	o, err := ParseOptions(newLines("listen 127.0.180.7:4000\nkey /k/new /k/old"))
	if err != nil {
		t.Fatal(err)
	}
	if o.KeyFile != "/k/new" || !reflect.DeepEqual(o.AcceptedKeyFiles, []string{"/k/old"}) {
		t.Errorf("KeyFile %q, AcceptedKeyFiles %q; want /k/new and [/k/old]", o.KeyFile, o.AcceptedKeyFiles)
	}
}
