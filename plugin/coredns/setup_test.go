package coral

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
)

func TestParse(t *testing.T) {
	cfg, err := parse(caddy.NewTestController("dns", `coral nyucd.test {
		alias nyud.test
		listen 127.0.0.2:4000
		bootstrap 127.0.0.3:4000 127.0.0.4:4000
		levels 60ms 20ms
		cluster 2 fra1
		classify 10.0.0.0/8 2
		classify 10.1.0.0/16 1
		classify 192.0.2.1 0
		answers 3
		nameservers 4
		answer_ttl 20s 40 90s
		load_threshold 90%
		ns_ttl 2h
		negative_ttl 60
		retry_ttl 5s
		probe none
		probe_cache 1m
		probe_limit 16
		live_within 20s
		check_interval 2s
		sync_wait 100ms
		proximity off
		proximity_wait 30ms
		proximity_timeout 2s
		proximity_cache 5m
		proximity_hops 3
		proximity_limit 8
		ecs 198.51.100.0/24 2001:db8::53 ::ffff:192.0.2.0/120
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.zone != "nyucd.test." || cfg.alias != "nyud.test." || cfg.listen != "127.0.0.2:4000" {
		t.Errorf("zones/listen: %q %q %q", cfg.zone, cfg.alias, cfg.listen)
	}
	if len(cfg.node.Bootstrap) != 2 || cfg.node.Bootstrap[1] != netip.MustParseAddrPort("127.0.0.4:4000") {
		t.Errorf("bootstrap %v", cfg.node.Bootstrap)
	}
	if cfg.node.Pins[2] != "fra1" {
		t.Errorf("pins %v", cfg.node.Pins)
	}
	// Longest prefix first.
	if len(cfg.overrides) != 3 || cfg.overrides[0].prefix.Bits() != 32 || cfg.overrides[1].level != 1 || cfg.overrides[2].level != 2 {
		t.Errorf("overrides %v", cfg.overrides)
	}
	s := cfg.set
	if s.answers != 3 || s.nameservers != 4 || s.nsTTL != 7200 || s.negTTL != 60 || s.retryTTL != 5 || s.loadThreshold != 90 {
		t.Errorf("settings %+v", s)
	}
	if got := s.answerTTL; len(got) != 3 || got[0] != 20 || got[1] != 40 || got[2] != 90 {
		t.Errorf("answer TTLs %v", got)
	}
	if cfg.probe != "none" || cfg.probeCache != time.Minute || cfg.probeLimit != 16 || cfg.liveWithin != 20*time.Second || cfg.checkInterval != 2*time.Second || cfg.syncWait != 100*time.Millisecond {
		t.Errorf("timing %+v", cfg)
	}
	if pc := cfg.prox; pc.mode != proximityOff || pc.wait != 30*time.Millisecond || pc.timeout != 2*time.Second || pc.cache != 5*time.Minute || pc.hops != 3 || pc.limit != 8 {
		t.Errorf("proximity %+v", pc)
	}
	wantECS := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8::53/128"), netip.MustParsePrefix("192.0.2.0/24")}
	if !slices.Equal(cfg.ecs, wantECS) {
		t.Errorf("ecs %v, want %v", cfg.ecs, wantECS)
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\n}"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.set
	if got := s.answerTTL; len(got) != 3 || got[0] != 30 || got[1] != 30 || got[2] != 60 {
		t.Errorf("answer TTLs %v, want the paper's 30 30 60", got)
	}
	if s.nsTTL != 3600 || s.answers != defaultAnswers || s.nameservers != defaultNameservers {
		t.Errorf("settings %+v", s)
	}
	if cfg.probe != "auto" || cfg.probeLimit != defaultProbeLimit || cfg.liveWithin != 15*time.Second || len(cfg.levels) != 2 {
		t.Errorf("config %+v", cfg)
	}
	if pc := cfg.prox; pc.mode != proximityOn || pc.wait != defaultProximityWait || pc.hops != 5 || pc.limit != defaultProximityLimit || len(cfg.ecs) != 0 {
		t.Errorf("proximity on with its defaults and ecs off, got %+v, ecs %v", pc, cfg.ecs)
	}
}

func TestParseErrors(t *testing.T) {
	const listen = "listen 127.0.0.2:4000\n"
	for _, tc := range []struct {
		name, input, want string
	}{
		{"no zone", "coral {\n" + listen + "}", "exactly one argument"},
		{"two zones", "coral a.test b.test {\n" + listen + "}", "exactly one argument"},
		{"no listen", "coral nyucd.test", "listen IP:PORT is required"},
		{"bad listen", "coral nyucd.test {\nlisten nowhere\n}", "want IP:PORT"},
		{"unknown property", "coral nyucd.test {\n" + listen + "colour blue\n}", `unknown property "colour"`},
		{"alias inside zone", "coral nyucd.test {\n" + listen + "alias x.nyucd.test\n}", "must not contain each other"},
		{"alias args", "coral nyucd.test {\n" + listen + "alias\n}", "alias takes 1 argument"},
		{"bootstrap empty", "coral nyucd.test {\n" + listen + "bootstrap\n}", "at least one"},
		{"bootstrap unspecified", "coral nyucd.test {\n" + listen + "bootstrap 0.0.0.0:4000\n}", "specific IP:PORT"},
		{"bootstrap no port", "coral nyucd.test {\n" + listen + "bootstrap 127.0.0.3\n}", "specific IP:PORT"},
		{"levels increasing", "coral nyucd.test {\n" + listen + "levels 20ms 60ms\n}", "must decrease"},
		{"levels bad", "coral nyucd.test {\n" + listen + "levels fast\n}", "positive duration"},
		{"levels none", "coral nyucd.test {\n" + listen + "levels\n}", "levels takes"},
		{"levels too many", "coral nyucd.test {\n" + listen + "levels 8ms 7ms 6ms 5ms 4ms 3ms 2ms 1ms\n}", "levels takes"},
		{"cluster level 0", "coral nyucd.test {\n" + listen + "cluster 0 x\n}", "level must be a number 1..n"},
		{"cluster level too high", "coral nyucd.test {\n" + listen + "cluster 3 x\n}", "levels 1..2"},
		{"cluster twice", "coral nyucd.test {\n" + listen + "cluster 1 x\ncluster 1 y\n}", "given twice"},
		{"classify bad prefix", "coral nyucd.test {\n" + listen + "classify 10.0.0.0/33 1\n}", "not a prefix"},
		{"classify bad level", "coral nyucd.test {\n" + listen + "classify 10.0.0.0/8 3\n}", "levels 0..2"},
		{"classify negative", "coral nyucd.test {\n" + listen + "classify 10.0.0.0/8 -1\n}", "0..n"},
		{"probe unknown", "coral nyucd.test {\n" + listen + "probe smoke\n}", "want auto, tcp, icmp or none"},
		{"probe_limit zero", "coral nyucd.test {\n" + listen + "probe_limit 0\n}", "1..4096"},
		{"probe_limit huge", "coral nyucd.test {\n" + listen + "probe_limit 100000\n}", "1..4096"},
		{"probe_limit args", "coral nyucd.test {\n" + listen + "probe_limit\n}", "probe_limit takes 1 argument"},
		{"proximity bad", "coral nyucd.test {\n" + listen + "proximity maybe\n}", "want on, subnet or off"},
		{"proximity_wait bad", "coral nyucd.test {\n" + listen + "proximity_wait 0\n}", "positive duration"},
		{"proximity_hops many", "coral nyucd.test {\n" + listen + "proximity_hops 17\n}", "1..16"},
		{"proximity_limit args", "coral nyucd.test {\n" + listen + "proximity_limit\n}", "proximity_limit takes 1 argument"},
		{"ecs none", "coral nyucd.test {\n" + listen + "ecs\n}", "ecs takes the prefixes"},
		{"ecs bad", "coral nyucd.test {\n" + listen + "ecs 10.0.0.0/33\n}", "not a prefix"},
		{"answers zero", "coral nyucd.test {\n" + listen + "answers 0\n}", "1..16"},
		{"nameservers many", "coral nyucd.test {\n" + listen + "nameservers 14\n}", "1..13"},
		{"answer_ttl count", "coral nyucd.test {\n" + listen + "answer_ttl 1s 2s\n}", "2 TTLs for 3 levels"},
		{"ns_ttl fraction", "coral nyucd.test {\n" + listen + "ns_ttl 1.5s\n}", "whole seconds"},
		{"negative_ttl bad", "coral nyucd.test {\n" + listen + "negative_ttl soon\n}", "number of seconds"},
		{"check_interval too long", "coral nyucd.test {\n" + listen + "check_interval 10s\n}", "at most half of live_within"},
		{"live_within short", "coral nyucd.test {\n" + listen + "live_within 500ms\n}", "at least 1s"},
		{"no key off loopback", "coral nyucd.test {\nlisten 192.0.2.1:4000\n}", "key is required"},
		{"twice", "coral nyucd.test {\n" + listen + "}\ncoral nyucd.test {\n" + listen + "}", "only once"},
		{"key none", "coral nyucd.test {\n" + listen + "key\n}", "key takes a key file"},
		{"key_file two", "coral nyucd.test {\n" + listen + "key_file a b\n}", "key_file takes a key file"},
		{"key twice", "coral nyucd.test {\n" + listen + "key a\nkey_file b\n}", "given once"},
		{"key five", "coral nyucd.test {\n" + listen + "key a b c d e\n}", "at most 4 keys"},
		// Single-value lines given twice are refused, not last-wins
		// (issue 37, finding 5).
		{"listen twice", "coral nyucd.test {\n" + listen + "listen 127.0.0.3:4000\n}", "Testfile:3 - Error during parsing: listen given twice (first on line 2)"},
		{"alias twice", "coral nyucd.test {\n" + listen + "alias a.test\nalias b.test\n}", "alias given twice (first on line 3)"},
		{"advertise twice", "coral nyucd.test {\n" + listen + "advertise 127.0.0.3:4000\nadvertise 127.0.0.4:4000\n}", "advertise given twice"},
		{"levels twice", "coral nyucd.test {\n" + listen + "levels 60ms 20ms\nlevels 50ms\n}", "levels given twice"},
		{"probe twice", "coral nyucd.test {\n" + listen + "probe tcp\nprobe icmp\n}", "probe given twice"},
		{"rrl twice", "coral nyucd.test {\n" + listen + "rrl 10\nrrl 20\n}", "rrl given twice"},
		{"answer_ttl twice", "coral nyucd.test {\n" + listen + "answer_ttl 30\nanswer_ttl 60\n}", "answer_ttl given twice"},
		{"drain_file twice", "coral nyucd.test {\n" + listen + "drain_file a\ndrain_file b\n}", "drain_file given twice"},
		{"proximity twice", "coral nyucd.test {\n" + listen + "proximity on\nproximity off\n}", "proximity given twice"},
		{"state_dir twice", "coral nyucd.test {\n" + listen + "state_dir a\nstate_dir b\n}", "state_dir given twice"},
		{"probe_rate bad", "coral nyucd.test {\n" + listen + "probe_rate 0\n}", "want a number 1..1000000"},
		{"load_threshold bad", "coral nyucd.test {\n" + listen + "load_threshold 0\n}", `load_threshold "0": want a percent 1-255, or off`},
		{"load_threshold word", "coral nyucd.test {\n" + listen + "load_threshold high\n}", "want a percent 1-255, or off"},
		{"load_threshold args", "coral nyucd.test {\n" + listen + "load_threshold 80 90\n}", "load_threshold takes one argument"},
		{"load_threshold twice", "coral nyucd.test {\n" + listen + "load_threshold 80\nload_threshold 90\n}", "load_threshold given twice"},
		{"probe_rate three", "coral nyucd.test {\n" + listen + "probe_rate 1 2 3\n}", "probe_rate takes SOURCE_PER_MINUTE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(caddy.NewTestController("dns", tc.input))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestRepeatableLines: the lines that add to a list may be given more
// than once.
func TestRepeatableLines(t *testing.T) {
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.0.2:4000\nbootstrap 127.0.0.3:4000\nbootstrap 127.0.0.4:4000\n"+
		"classify 10.0.0.0/8 1\nclassify 10.1.0.0/16 2\necs 10.0.0.1\necs 10.0.0.2\ncaa letsencrypt.org\ncaa iodef mailto:a@example.net\n}")
	if len(cfg.node.Bootstrap) != 2 || len(cfg.overrides) != 2 || len(cfg.ecs) != 2 || len(cfg.set.caa) != 3 {
		t.Errorf("bootstrap %v, classify %v, ecs %v, caa %v", cfg.node.Bootstrap, cfg.overrides, cfg.ecs, cfg.set.caa)
	}
}

// TestSetupErrorsPlaced (issue 37, finding 5): the errors found once the
// whole block is read say the file and the line they are about: the alias
// zone missing from the block's keys (the alias line), a key file that
// cannot be read (the key line).
func TestSetupErrorsPlaced(t *testing.T) {
	c := caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\nalias nyud.test\n}")
	c.ServerBlockKeys = []string{"nyucd.test"}
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "Testfile:3 - Error during parsing: zone nyud.test. is not among") {
		t.Errorf("alias zone missing from the keys: %v", err)
	}
	c = caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\n\nkey /nonexistent/network.key\n}")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "Testfile:4 - Error during parsing:") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing key file: %v", err)
	}
	c = caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\nkey_file /nonexistent/network.key\n}")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "Testfile:3 - Error during parsing:") {
		t.Errorf("missing key_file: %v", err)
	}
}

func TestSetupChecksBlockZones(t *testing.T) {
	c := caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\nalias nyud.test\n}")
	c.ServerBlockKeys = []string{"nyucd.test"}
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "nyud.test. is not among") {
		t.Errorf("alias zone missing from the block: %v", err)
	}
	c = caddy.NewTestController("dns", "coral nyucd.test {\nlisten 127.0.0.2:4000\nalias nyud.test\n}")
	c.ServerBlockKeys = []string{"nyucd.test:53", "dns://nyud.test"}
	if err := checkBlockZones(c, &config{zone: "nyucd.test.", alias: "nyud.test."}); err != nil {
		t.Errorf("both zones present: %v", err)
	}
}

func TestParseCAA(t *testing.T) {
	const listen = "listen 127.0.0.2:4000\n"
	const acct = "https://acme-v02.api.letsencrypt.org/acme/acct/12345"
	for _, tc := range []struct {
		name, lines string
		want        []caaProperty
	}{
		{"issuer alone is issue and issuewild", "caa letsencrypt.org",
			[]caaProperty{{"issue", "letsencrypt.org"}, {"issuewild", "letsencrypt.org"}}},
		{"parameters in the order given", "caa letsencrypt.org validationmethods=dns-01 accounturi=" + acct,
			[]caaProperty{
				{"issue", "letsencrypt.org; validationmethods=dns-01; accounturi=" + acct},
				{"issuewild", "letsencrypt.org; validationmethods=dns-01; accounturi=" + acct}}},
		{"issuer case and trailing dot", "caa LetsEncrypt.ORG.",
			[]caaProperty{{"issue", "letsencrypt.org"}, {"issuewild", "letsencrypt.org"}}},
		{"issuewild only", "caa issuewild sectigo.com validationmethods=dns-01,tls-alpn-01",
			[]caaProperty{{"issuewild", "sectigo.com; validationmethods=dns-01,tls-alpn-01"}}},
		{"issue and iodef", "caa issue pki.goog\ncaa iodef mailto:security@example.net\ncaa iodef https://example.net/caa",
			[]caaProperty{{"issue", "pki.goog"}, {"iodef", "mailto:security@example.net"}, {"iodef", "https://example.net/caa"}}},
		{"two CAs", "caa letsencrypt.org\ncaa issue pki.goog",
			[]caaProperty{{"issue", "letsencrypt.org"}, {"issuewild", "letsencrypt.org"}, {"issue", "pki.goog"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\n"+listen+tc.lines+"\n}"))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.set.caa, tc.want) {
				t.Errorf("caa %v, want %v", cfg.set.caa, tc.want)
			}
		})
	}
	cfg, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\n"+listen+"}"))
	if err != nil || cfg.set.caa != nil {
		t.Errorf("default: no CAA records, got %v (%v)", cfg.set.caa, err)
	}
}

func TestParseCAAErrors(t *testing.T) {
	const listen = "listen 127.0.0.2:4000\n"
	long := strings.Repeat("a", 200)
	for _, tc := range []struct {
		name, line, want string
	}{
		{"no issuer", "caa", "caa needs an issuer"},
		{"tag without issuer", "caa issue", "issuer's domain name is missing"},
		{"issuer with a space", `caa "lets encrypt.org"`, "want the CA's domain name"},
		{"issuer with a semicolon", "caa letsencrypt.org;", "want the CA's domain name"},
		{"issuer label hyphen", "caa -le.org", "want the CA's domain name"},
		{"issuer empty label", "caa letsencrypt..org", "want the CA's domain name"},
		{"issuer label too long", "caa " + strings.Repeat("a", 64) + ".org", "want the CA's domain name"},
		{"parameter without value", "caa letsencrypt.org accounturi", "want NAME=VALUE"},
		{"parameter empty value", "caa letsencrypt.org validationmethods=", "want NAME=VALUE"},
		{"unknown parameter", "caa letsencrypt.org policy=strict", `"policy": want accounturi or validationmethods`},
		{"parameter twice", "caa letsencrypt.org validationmethods=dns-01 validationmethods=http-01", "validationmethods given twice"},
		{"accounturi http", "caa letsencrypt.org accounturi=http://acme.test/acct/1", "want the ACME account's https URL"},
		{"accounturi relative", "caa letsencrypt.org accounturi=/acct/1", "want the ACME account's https URL"},
		{"accounturi semicolon", "caa letsencrypt.org accounturi=https://acme.test/a;b", "want the ACME account's https URL"},
		{"methods empty element", "caa letsencrypt.org validationmethods=dns-01,", "want method names"},
		{"methods bad name", "caa letsencrypt.org validationmethods=dns_01", "want method names"},
		{"methods twice", "caa letsencrypt.org validationmethods=dns-01,dns-01", "dns-01 given twice"},
		{"iodef no URL", "caa iodef", "iodef takes one URI"},
		{"iodef two URLs", "caa iodef mailto:a@example.net mailto:b@example.net", "iodef takes one URI"},
		{"iodef ftp", "caa iodef ftp://example.net/", "want a mailto:, http: or https: URL"},
		{"iodef mailto without address", "caa iodef mailto:", "want a mailto:, http: or https: URL"},
		{"duplicate", "caa issue pki.goog\ncaa issue PKI.goog", `caa issue "pki.goog" given twice`},
		{"too many", "caa a.test\ncaa b.test\ncaa c.test\ncaa d.test\ncaa e.test", "10 records, at most 8"},
		{"too big", "caa issue a.test accounturi=https://" + long + "\ncaa issue b.test accounturi=https://" + long +
			"\ncaa issue c.test accounturi=https://" + long + "\ncaa issue d.test accounturi=https://" + long +
			"\ncaa issue e.test accounturi=https://" + long, "at most 1000 fit one UDP answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\n"+listen+tc.line+"\n}"))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseRRL(t *testing.T) {
	const listen = "listen 127.0.0.2:4000\n"
	for _, tc := range []struct {
		name, line string
		want       *rrlConfig
	}{
		{"off by default", "", nil},
		{"defaults", "rrl 20", &rrlConfig{rates: [3]float64{20, 20, 20}, slip: 2, window: 15 * time.Second, table: 16384}},
		{"every option", "rrl 50 nxdomains 10 errors 5 slip 0 window 5s table 1000",
			&rrlConfig{rates: [3]float64{50, 10, 5}, slip: 0, window: 5 * time.Second, table: 1024}},
		{"slip every one", "rrl 1 slip 1 table 256", &rrlConfig{rates: [3]float64{1, 1, 1}, slip: 1, window: 15 * time.Second, table: 256}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\n"+listen+tc.line+"\n}"))
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.rrl == nil) != (tc.want == nil) || cfg.rrl != nil && *cfg.rrl != *tc.want {
				t.Errorf("rrl %+v, want %+v", cfg.rrl, tc.want)
			}
		})
	}
}

func TestParseRRLErrors(t *testing.T) {
	const listen = "listen 127.0.0.2:4000\n"
	for _, tc := range []struct {
		name, line, want string
	}{
		{"no rate", "rrl", "rrl needs RESPONSES_PER_SECOND"},
		{"rate zero", "rrl 0", `rrl "0": want responses per second, 1 to 1000000`},
		{"rate fraction", "rrl 2.5", "want responses per second"},
		{"rate huge", "rrl 1000001", "want responses per second"},
		{"option without value", "rrl 10 slip", "rrl slip: missing its value"},
		{"unknown option", "rrl 10 burst 5", `unknown option "burst"`},
		{"option twice", "rrl 10 slip 1 slip 2", "rrl slip given twice"},
		{"nxdomains zero", "rrl 10 nxdomains 0", "rrl nxdomains"},
		{"errors bad", "rrl 10 errors many", "rrl errors"},
		{"slip negative", "rrl 10 slip -1", "want 0 (drop every limited response) to 10"},
		{"slip big", "rrl 10 slip 11", "to 10"},
		{"window short", "rrl 10 window 500ms", "whole seconds from 1s to 1h"},
		{"window fraction", "rrl 10 window 1.5s", "whole seconds"},
		{"window long", "rrl 10 window 2h", "1s to 1h"},
		{"table small", "rrl 10 table 100", "want 256 to 1048576 buckets"},
		{"table huge", "rrl 10 table 2000000", "want 256 to 1048576 buckets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(caddy.NewTestController("dns", "coral nyucd.test {\n"+listen+tc.line+"\n}"))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// TestSetupKey: `key PRIMARY [ACCEPTED...]` names the primary and the
// accepted key files; key_file is its one-file spelling.
func TestSetupKey(t *testing.T) {
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.180.30:4000\nkey /k/new /k/old\n}")
	o := cfg.nodeOptions()
	if o.KeyFile != "/k/new" || len(o.AcceptedKeyFiles) != 1 || o.AcceptedKeyFiles[0] != "/k/old" {
		t.Errorf("key /k/new /k/old: KeyFile %q, AcceptedKeyFiles %q", o.KeyFile, o.AcceptedKeyFiles)
	}
	cfg = parseTest(t, "coral nyucd.test {\nlisten 127.0.180.30:4000\nkey_file /k/one\n}")
	if o := cfg.nodeOptions(); o.KeyFile != "/k/one" || len(o.AcceptedKeyFiles) != 0 {
		t.Errorf("key_file /k/one: KeyFile %q, AcceptedKeyFiles %q", o.KeyFile, o.AcceptedKeyFiles)
	}
}
