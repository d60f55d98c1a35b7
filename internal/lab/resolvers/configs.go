//go:build linux

package resolvers

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// configUnbound: unbound -d -c unbound.conf, logging to stderr.
func (r *Resolver) configUnbound(o Options, sockDir string) ([]string, error) {
	verbosity, queries := 3, "yes" // query level: names each query sent and to which server
	if o.Debug {
		verbosity = 4
	}
	if o.Quiet {
		verbosity, queries = 1, "no"
	}
	allow := ""
	for _, p := range o.Allow {
		allow += fmt.Sprintf("\taccess-control: %s allow\n", p.Masked())
	}
	conf := filepath.Join(o.Dir, "unbound.conf")
	ctl := filepath.Join(sockDir, "unbound.ctl")
	text := fmt.Sprintf(`# written by resolvers
server:
	directory: %[1]q
	chroot: ""
	username: ""
	pidfile: %[2]q
	use-syslog: no
	logfile: ""
	log-time-ascii: yes
	verbosity: %[3]d
	log-queries: %[8]s
	log-replies: %[8]s
	log-servfail: yes
	interface: %[4]s@53
	outgoing-interface: %[4]s
	do-ip4: yes
	do-ip6: no
	access-control: 127.0.0.0/8 allow
%[9]s	do-not-query-localhost: no
	root-hints: %[5]q
	module-config: "iterator"
	qname-minimisation: %[6]s
	# unbound serves test. (RFC 6761) itself as an empty zone by default;
	# the lab's names live under it.
	local-zone: "test." nodefault

remote-control:
	control-enable: yes
	control-interface: %[7]q
	control-use-cert: no
`, o.Dir, filepath.Join(o.Dir, "unbound.pid"), verbosity, o.Addr, filepath.Join(o.Dir, "root.hints"),
		yesNo(o.QNameMinimisation), ctl, queries, allow)
	if err := writeFile(conf, text); err != nil {
		return nil, err
	}
	r.Config = conf
	r.flush = func(ctx context.Context) error {
		for _, cmd := range [][]string{{"flush_zone", "."}, {"flush_infra", "all"}} {
			if _, err := control(ctx, "unbound-control", append([]string{"-c", conf}, cmd...)...); err != nil {
				return err
			}
		}
		return nil
	}
	// -d -d: foreground, and log to stderr even once running.
	return []string{"-d", "-d", "-c", conf}, nil
}

// namedConf is named.conf; its arguments: 1 directory, 2 pid file, 3 session
// key file, 4 dump file, 5 statistics file, 6 address, 7 qname-minimization
// mode, 8 the rndc key statement, 9 root hints file, 10 log severity.
const namedConf = `# written by resolvers
options {
	directory %[1]q;
	pid-file %[2]q;
	session-keyfile %[3]q;
	managed-keys-directory %[1]q;
	dump-file %[4]q;
	statistics-file %[5]q;
	listen-on port 53 { %[6]s; };
	listen-on-v6 { none; };
	query-source address %[6]s;
	recursion yes;
	allow-query { 127.0.0.0/8; };
	allow-recursion { 127.0.0.0/8; };
	allow-query-cache { 127.0.0.0/8; };
	dnssec-validation no;
	qname-minimization %[7]s;
	querylog yes;
};

%[8]s
controls {
	inet %[6]s port 953 allow { 127.0.0.0/8; } keys { "resolvers"; };
};

zone "." {
	type hint;
	file %[9]q;
};

logging {
	channel lab {
		stderr;
		severity %[10]s;
		print-time yes;
		print-category yes;
		print-severity yes;
	};
	// debug 11 has "sending packet to <server>" with the packet; needs
	// named -d >= 1 to be in debug mode at all
	channel lab_resolver {
		stderr;
		severity debug 11;
		print-time yes;
		print-category yes;
		print-severity yes;
	};
	category default { lab; };
	category queries { lab; };
	category query-errors { lab; };
	category lame-servers { lab; };
	category edns-disabled { lab; };
	category resolver { lab_resolver; };
};
`

// configBIND: named -f -4 -c named.conf, logging to the log file via its
// logging statement (named -g would ignore it).
func (r *Resolver) configBIND(o Options) ([]string, error) {
	conf := filepath.Join(o.Dir, "named.conf")
	rndcConf := filepath.Join(o.Dir, "rndc.conf")
	secret := randomSecret()
	qmin := "disabled"
	if o.QNameMinimisation {
		qmin = "relaxed" // the 9.18 default
	}
	// -d 1 puts named in debug mode, so the resolver channel's debug 11
	// applies; other categories log at info unless Debug.
	severity, debug := "info", "1"
	if o.Debug {
		severity, debug = "dynamic", "10"
	}
	key := fmt.Sprintf("key \"resolvers\" {\n\talgorithm hmac-sha256;\n\tsecret %q;\n};\n", secret)
	text := fmt.Sprintf(namedConf, o.Dir, filepath.Join(o.Dir, "named.pid"), filepath.Join(o.Dir, "session.key"),
		filepath.Join(o.Dir, "named_dump.db"), filepath.Join(o.Dir, "named.stats"),
		o.Addr, qmin, key, filepath.Join(o.Dir, "root.hints"), severity)
	if err := writeFile(conf, text); err != nil {
		return nil, err
	}
	rndc := fmt.Sprintf("%soptions {\n\tdefault-key \"resolvers\";\n\tdefault-server %s;\n\tdefault-port 953;\n};\n", key, o.Addr)
	if err := writeFile(rndcConf, rndc); err != nil {
		return nil, err
	}
	r.Config = conf
	r.flush = func(ctx context.Context) error {
		_, err := control(ctx, "rndc", "-c", rndcConf, "flush")
		return err
	}
	// -L: where named logs before (and outside) the logging statement,
	// e.g. why it could not start.
	return []string{"-f", "-4", "-d", debug, "-L", r.LogFile, "-c", conf}, nil
}

// configKnot: kresd -n -c kresd.conf <Dir>/kresd (its rundir), logging to
// stderr.
func (r *Resolver) configKnot(o Options, sockDir string) ([]string, error) {
	conf := filepath.Join(o.Dir, "kresd.conf")
	ctl := filepath.Join(sockDir, "kresd.ctl")
	rundir := filepath.Join(o.Dir, "kresd")
	var hints []string
	for i, a := range o.RootHints {
		hints = append(hints, fmt.Sprintf("[%q] = { %q }", RootServerName(i), a.String()))
	}
	logging := "log_level('info')\n-- debug messages of the groups that show upstream servers and answers\nlog_groups({ 'iterat', 'select', 'resolv' })\n"
	if o.Debug {
		logging = "log_level('debug')\n"
	}
	qmin := "-- QNAME minimisation: kresd default (on)\n"
	if !o.QNameMinimisation {
		qmin = "option('NO_MINIMIZE', true)\n"
	}
	text := fmt.Sprintf(`-- written by resolvers
log_target('stderr')
%[1]s
net.ipv6 = false
net.listen(%[2]q, 53, { kind = 'dns' })
net.listen(%[3]q, nil, { kind = 'control' })
net.outgoing_v4(%[2]q)
-- The Debian default configuration's modules.
modules = {
	'hints > iterate',
	'stats',
	'predict',
}
hints.root({ %[4]s })
-- the fake root is unsigned: no validation
trust_anchors.remove('.')
-- kresd ignores loopback and private addresses learned from referrals
-- (glue, NS address records) unless this flag is set (root hints are
-- used regardless); policy.STUB/FORWARD set it too
option('ALLOW_LOCAL', true)
-- kresd answers test. (RFC 6761) itself with NXDOMAIN by default (its
-- policy.special_names); the lab's names live under it.
policy.add(policy.suffix(policy.PASS, { todname('test.') }))
%[5]scache.open(10 * MB, 'lmdb://%[6]s')
`, logging, o.Addr.String(), ctl, strings.Join(hints, ", "), qmin, filepath.Join(o.Dir, "kresd-cache"))
	if err := writeFile(conf, text); err != nil {
		return nil, err
	}
	if err := mkdir(rundir); err != nil {
		return nil, err
	}
	r.Config = conf
	r.flush = func(ctx context.Context) error {
		out, err := dialControl(ctx, ctl, "cache.clear()")
		if err != nil {
			return err
		}
		if strings.Contains(out, "error") {
			return fmt.Errorf("cache.clear(): %s", out)
		}
		return nil
	}
	return []string{"-n", "-c", conf, rundir}, nil
}

// configPowerDNS: pdns_recursor --config-dir=<Dir> (reads recursor.conf),
// logging to stderr.
func (r *Resolver) configPowerDNS(o Options, sockDir string) ([]string, error) {
	conf := filepath.Join(o.Dir, "recursor.conf")
	loglevel := 6
	if o.Debug {
		loglevel = 9
	}
	text := fmt.Sprintf(`# written by resolvers
daemon=no
write-pid=yes
socket-dir=%[1]s
disable-syslog=yes
log-timestamp=yes
loglevel=%[2]d
# log every incoming query, and trace every resolution (which servers were
# asked and what they said)
quiet=no
trace=yes
local-address=%[3]s
local-port=53
query-local-address=%[3]s
allow-from=127.0.0.0/8
# the default list includes 127.0.0.0/8
dont-query=
dnssec=off
hint-file=%[4]s
qname-minimization=%[5]s
# no secpoll.powerdns.com queries to the fake root
security-poll-suffix=
`, sockDir, loglevel, o.Addr, filepath.Join(o.Dir, "root.hints"), yesNo(o.QNameMinimisation))
	if err := writeFile(conf, text); err != nil {
		return nil, err
	}
	r.Config = conf
	r.flush = func(ctx context.Context) error {
		_, err := control(ctx, "rec_control", "--config-dir="+o.Dir, "--socket-dir="+sockDir, "wipe-cache", ".$")
		return err
	}
	return []string{"--config-dir=" + o.Dir}, nil
}
