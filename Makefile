# Coral — see README.md. `make demo` runs a local network, `make test` runs
# every check CI runs.
GO       ?= go
FUZZTIME ?= 30s

.PHONY: wan-short all build demo test fmt-check vet lint tidy-check unit deps fuzz eval conformance coredns bin/coredns caddy bin/caddy coral-check bin/coral-check packages clean

all: build

build:
	$(GO) build ./...

# A whole Coral CDN on loopback (cmd/coraldemo, internal/lab/demonet): six nodes
# of bin/coredns and bin/caddy in two clusters, Unbound, a fake DNS root and
# an origin site. It prints commands to try and runs until Ctrl-C; needs
# root. `make demo DEMO_SMOKE=1` runs those commands once, checks them and
# exits 0 or 1. The DSHT on its own: `go run ./cmd/dhtdemo`.
demo: coredns caddy
	@bash builds/apt-install.sh demo "unbound unbound-control dig curl openssl" unbound dnsutils curl openssl
	$(GO) run ./cmd/coraldemo $(if $(filter-out 0,$(DEMO_SMOKE)),-smoke)

# Everything: formatting, vet, staticcheck (pinned in go.mod), go.mod drift,
# and all tests under the race detector, including the resolver lab, which
# needs bin/coredns and the Debian resolvers, the proxy lab, which needs
# bin/caddy, the status page test, which needs bin/caddy and Chromium, and
# the short wide-area run (eval/wan's TestShort), which needs both binaries
# and root (deps installs the Debian packages as root).
test: fmt-check vet lint tidy-check deps coredns caddy coral-check unit

fmt-check:
	@out=$$(find . -name '*.go' -not -path './builds/*/work/*' -print0 | xargs -0 gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) tool staticcheck ./...

tidy-check:
	$(GO) mod tidy -diff

# From Debian: the resolvers, dig and dnsperf for the resolver lab (and
# eval/dnsperf's test), Chromium for the status page test, curl for the
# demo network tests, promtool for the alert rules (test/deploy), iproute2
# and nftables for the lab of separate hosts (internal/lab/netns,
# eval/chaos), wrk and nginx for the tests of eval/httpbench and
# eval/headerfields, and iptables, tc, chrt and traceroute for the
# wide-area lab (internal/lab/wan, eval/wan).
# Without root it only reports what is missing; those tests then skip (and
# fail under CI=true).
deps:
	@for s in test/resolverlab/install-deps.sh test/statuspage/install-deps.sh \
			test/demonet/install-deps.sh test/deploy/install-deps.sh internal/lab/netns/install-deps.sh \
			eval/httpbench/install-deps.sh eval/scale/install-deps.sh internal/lab/wan/install-deps.sh; do \
		if [ "$$(id -u)" -eq 0 ]; then bash $$s || exit 1; \
		else bash $$s || echo "deps: not root; the tests that need what $$s installs will skip"; fi; \
	done

unit:
	$(GO) test -race -count=1 ./...

# The short form of the wide-area run alone (eval/wan's TestShort; needs
# root, bin/coredns and bin/caddy); make test runs it with the rest.
wan-short: coredns caddy
	$(GO) test -race -count=1 -run '^TestShort$$' -v ./eval/wan

# Run every native fuzz target for FUZZTIME each.
fuzz:
	$(GO) test -run=NONE -fuzz='^FuzzDecodeMessage$$' -fuzztime=$(FUZZTIME) ./coraldht/internal/wire
	for target in FuzzParseTimeExceeded FuzzParseEcho; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./coraldht/icmpprobe || exit 1; \
	done
	$(GO) test -run=NONE -fuzz='^FuzzParseFleetFile$$' -fuzztime=$(FUZZTIME) ./coraldht/fleet
	for target in FuzzParseKeyText FuzzHandleDatagram; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./coraldht || exit 1; \
	done
	for target in FuzzParseName FuzzServeDNS FuzzCookieCheck FuzzDNSMatchesProxy \
			FuzzCheckCorefile FuzzECSOption FuzzParseCAA FuzzParseRRL; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./plugin/coredns || exit 1; \
	done
	for target in FuzzParseHost FuzzCacheKey FuzzParseCacheKey FuzzNormalizeShortcuts FuzzOriginURL FuzzEscapeQuery FuzzCheckDomain; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./coralname || exit 1; \
	done
	for target in FuzzDecodeReference FuzzRequestThroughProxy FuzzLocalizeLocation FuzzTargetCache \
			FuzzReadHead FuzzParseContentRange FuzzParseManifest; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./module/caddy/proxy || exit 1; \
	done
	for target in FuzzDecodePurgeRequest FuzzDecodePurgeReply FuzzParsePurgeURL; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./module/caddy/purge || exit 1; \
	done
	for target in FuzzDecodePurgeRequest FuzzDecodePurgeReply FuzzParsePurgeURL; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./module/caddy/purge || exit 1; \
	done
	for target in FuzzNoServeRedirect FuzzParseSignedList FuzzParseEntry; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./module/caddy/abuse || exit 1; \
	done
	for target in FuzzParseCacheControl FuzzTargetedCacheControl FuzzParseHTTPDate; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./module/caddy/httpcache || exit 1; \
	done
	$(GO) test -run=NONE -fuzz='^FuzzDecodeMeta$$' -fuzztime=$(FUZZTIME) ./module/caddy/diskcache
	$(GO) test -run=NONE -fuzz='^FuzzReadCheckpoint$$' -fuzztime=$(FUZZTIME) ./module/caddy/diskcache
	$(GO) test -run=NONE -fuzz='^FuzzParseObjectFile$$' -fuzztime=$(FUZZTIME) ./module/caddy/diskcache
	$(GO) test -run=NONE -fuzz='^FuzzParseRecipe$$' -fuzztime=$(FUZZTIME) ./internal/lab/evilorigin
	$(GO) test -run=NONE -fuzz='^FuzzParseAndScore$$' -fuzztime=$(FUZZTIME) ./eval/conformance
	$(GO) test -run=NONE -fuzz='^FuzzParseMetrics$$' -fuzztime=$(FUZZTIME) ./internal/lab/netns/coralnet
	$(GO) test -run=NONE -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./internal/lab/profdiff
	$(GO) test -run=NONE -fuzz='^FuzzParseMessages$$' -fuzztime=$(FUZZTIME) ./internal/lab/wan/nfq
	$(GO) test -run=NONE -fuzz='^FuzzRegions$$' -fuzztime=$(FUZZTIME) ./eval/report
	$(GO) test -run=NONE -fuzz='^FuzzParseTables$$' -fuzztime=$(FUZZTIME) ./internal/portguard

# The experiments behind docs/evaluation.md, regenerated one after the
# other from a clean tree with the commands the documents show (hours; the
# WonderProxy ones need CORAL_RTT_DATA, conformance CACHE_TESTS_DIR, chaos
# and conformance root), then the documents' figures rewritten from them
# (eval/report/doc.go). EVAL_FLAGS="-kind virtual" runs the simulations
# alone, EVAL_FLAGS="-only hotspot.json" one file.
eval: coredns caddy
	$(GO) run ./eval/report -regenerate $(EVAL_FLAGS)

# RFC 9111 conformance (docs/evaluation.md): the cache-tests suite, kept
# outside the repository, against bin/caddy's coral_proxy in strict mode
# and Debian's Traffic Server, Squid and nginx (installed here as root;
# one that is missing is skipped), about 5 minutes. CACHE_TESTS_DIR names a
# clone of https://github.com/http-tests/cache-tests with
# `npm install --omit=dev` done in it. Writes docs/eval/conformance/. Not
# part of `make test`.
conformance:
	@if [ -z "$(CACHE_TESTS_DIR)" ]; then \
		echo "conformance: set CACHE_TESTS_DIR to a clone of https://github.com/http-tests/cache-tests"; \
		echo "  (git clone https://github.com/http-tests/cache-tests && cd cache-tests && npm install --omit=dev;"; \
		echo "  docs/evaluation.md names the commit of the committed results)"; \
		exit 1; fi
	@if [ "$$(id -u)" -eq 0 ]; then bash eval/conformance/install-deps.sh; fi
	bash builds/caddy/build.sh
	CACHE_TESTS_DIR="$(CACHE_TESTS_DIR)" $(GO) run ./eval/conformance

# CoreDNS v1.15.0 with the coral plugin, reproducibly, into bin/coredns
# (see builds/coredns/README.md). Both names are phony on purpose: the script
# knows the inputs and skips an up-to-date binary itself; FORCE=1 rebuilds.
coredns bin/coredns:
	bash builds/coredns/build.sh

# Caddy v2.11.9 with the coral module (module/caddy), built with xcaddy from
# go.mod's tool directive, reproducibly, into bin/caddy (see
# builds/caddy/README.md). Phony for the same reason as coredns.
caddy bin/caddy:
	bash builds/caddy/build.sh

# cmd/coral-check, which checks a Corefile's coral blocks without starting
# anything, into bin/coral-check (the coral-dns package ships it as
# /usr/bin/coral-check), reproducibly (-trimpath). The file is replaced
# (renamed over, whole) only when the new build differs: tests that read it
# while another runs this (test/docs's make packages) never see half a file.
coral-check bin/coral-check:
	@mkdir -p bin
	@tmp=$$(mktemp bin/.coral-check.XXXXXX) && \
	CGO_ENABLED=0 $(GO) build -trimpath -o "$$tmp" ./cmd/coral-check && \
	if cmp -s "$$tmp" bin/coral-check; then rm -f "$$tmp"; echo "bin/coral-check is up to date"; \
	else chmod 0755 "$$tmp" && mv -f "$$tmp" bin/coral-check && echo "wrote bin/coral-check"; fi

# The .deb packages coral-dns and coral-proxy (deploy/, nfpm from go.mod's
# tool directive), reproducibly, into bin/packages; see docs/operations.md.
packages: coredns caddy coral-check
	bash deploy/build-packages.sh bin/packages

clean:
	rm -rf bin
	if [ -d builds/coredns/work ]; then chmod -R u+w builds/coredns/work; fi; rm -rf builds/coredns/work
	if [ -d builds/caddy/work ]; then chmod -R u+w builds/caddy/work; fi; rm -rf builds/caddy/work
