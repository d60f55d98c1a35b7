#!/usr/bin/env bash
# Builds bin/coredns: stock CoreDNS plus the coral plugin, reproducibly.
# See README.md beside this file. Env: FORCE=1 rebuilds even when up to date;
# GITCOMMIT overrides the version label baked into the binary.
set -euo pipefail

COREDNS_VERSION=v1.15.0
# coral goes immediately before this plugin.cfg line (see README.md).
ANCHOR='cache:cache'
CORAL_LINE='coral:github.com/coralcdn/coral/plugin/coredns'

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
work="$here/work"

# One build at a time per checkout: a second caller waits here, then finds
# the binary up to date (make test and an experiment may both ask).
exec 9>"$here/.build.lock"
flock 9
src_copy="$work/coredns"
out="$root/bin/coredns"

die() { echo "build.sh: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

grep -qs '^module github.com/coralcdn/coral$' "$root/go.mod" \
	|| die "cannot find the coral repository at $root"

# Pin the Go environment so the caller's settings cannot change the bytes.
# (The Go toolchain version itself is recorded in the binary and does matter.)
export CGO_ENABLED=0 GO111MODULE=on GOWORK=off GOFLAGS=

# --- up to date? --------------------------------------------------------------
# shellcheck source=../uptodate.sh
. "$here/../uptodate.sh"
exit_if_up_to_date "$out" ./plugin/coredns "$here/build.sh" "$here/../uptodate.sh"

# --- CoreDNS source from the module cache ----------------------------------------
# Run in a throwaway module holding a copy of coral's go.sum: the download is
# checked against the checksum coral already pins (no checksum-database lookup,
# so it works offline with a warm module cache) and coral's own go.mod/go.sum
# are never touched.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# bin/coredns gets this time, not the time the build ended, so that a source
# edited while the build ran still counts as newer next time.
touch "$tmp/started"
printf 'module coredns-build-tmp\n\ngo 1.26.0\n' >"$tmp/go.mod"
cp "$root/go.sum" "$tmp/go.sum"
json=$(cd "$tmp" && go mod download -json "github.com/coredns/coredns@$COREDNS_VERSION") \
	|| die "go mod download github.com/coredns/coredns@$COREDNS_VERSION failed: $json"
src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')
[ -n "$src" ] || src="$(go env GOMODCACHE)/github.com/coredns/coredns@$COREDNS_VERSION"
if [ ! -f "$src/coredns.go" ] || [ ! -f "$src/plugin.cfg" ]; then
	die "no CoreDNS source at '$src'"
fi

# --- fresh, writable copy -----------------------------------------------------
# The module cache is read-only; make the old copy writable so rm works as non-root.
if [ -e "$work" ]; then chmod -R u+w "$work" 2>/dev/null || true; fi
rm -rf "$work"
mkdir -p "$work"
cp -R "$src/." "$src_copy"
chmod -R u+w "$src_copy"
# We never run CoreDNS's own tests, and one of them (plugin/pkg/proxy/doq_test.go)
# is not gofmt-clean, which would trip `gofmt -l .` in the repo's `make fmt-check`.
find "$src_copy" -name '*_test.go' -type f -delete
cd "$src_copy"

# --- plugin.cfg: coral right above cache ------------------------------------------
grep -qx "$ANCHOR" plugin.cfg || die "'$ANCHOR' not found in CoreDNS $COREDNS_VERSION plugin.cfg"
grep -q '^coral:' plugin.cfg && die "plugin.cfg already has a coral line"
sed -i "/^${ANCHOR}\$/i ${CORAL_LINE}" plugin.cfg

# --- go.mod: require coral from this working tree ---------------------------------
# A relative replace path: the absolute one would be embedded in the binary's
# build info and make the bytes depend on where the repository is checked out.
rel=$(realpath --relative-to="$src_copy" "$root")
go mod edit -require=github.com/coralcdn/coral@v0.0.0 -replace="github.com/coralcdn/coral=$rel"
# Coral's go.sum knows the checksums of any versions coral pulls above CoreDNS's.
sort -u "$root/go.sum" go.sum >"$tmp/go.sum"
cp "$tmp/go.sum" go.sum

# --- go generate, as CoreDNS's Makefile does -----------------------------------------
go generate coredns.go
awk '/^var Directives/ {on=1} on && /"coral"/ {c=NR} on && /"cache"/ {k=NR}
	END {exit !(c && k && c < k)}' core/dnsserver/zdirectives.go \
	|| die "core/dnsserver/zdirectives.go does not list coral before cache"
grep -q '"github.com/coralcdn/coral/plugin/coredns"' core/plugin/zplugin.go \
	|| die "core/plugin/zplugin.go does not import the coral plugin"

# --- build ----------------------------------------------------------------------
if [ -n "${GITCOMMIT:-}" ]; then
	label=$GITCOMMIT
elif rev=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null); then
	label="coral-$rev"
	if [ -n "$(git -C "$root" status --porcelain --untracked-files=normal -- \
		plugin coraldht coralname internal go.mod go.sum 2>/dev/null)" ]; then
		label="$label-dirty"
	fi
else
	label=coral-dev
fi

# -mod=mod: resolve the combined module graph (coral may require newer versions
# than CoreDNS's go.mod lists) and fetch any missing module through the proxy.
# It only ever edits this copy's go.mod/go.sum.
log "building CoreDNS $COREDNS_VERSION + coral ($label)"
go build -mod=mod -trimpath -buildvcs=false -tags=grpcnotrace \
	-ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=$label" \
	-o "$work/coredns.bin" .

mkdir -p "$root/bin"
mv -f "$work/coredns.bin" "$out"
touch -r "$tmp/started" "$out"
log "wrote $out"
if command -v sha256sum >/dev/null; then sha256sum "$out" >&2; fi
