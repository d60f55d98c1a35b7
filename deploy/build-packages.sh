#!/usr/bin/env bash
# Builds the .deb packages coral-dns and coral-proxy from bin/coredns,
# bin/coral-check and bin/caddy with nfpm (go.mod's tool directive), reproducibly: the same
# commit and binaries give the same bytes. `make packages` runs it after
# building the binaries.
#
#   deploy/build-packages.sh [OUTDIR]      (default bin/packages)
#
# Env: CORAL_VERSION and SOURCE_DATE_EPOCH override the version and the time stamped on every file
# (default: from the commit, as `0.0~gitYYYYMMDDhhmmss.<commit>`).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$root"
out=${1:-bin/packages}
out=$(mkdir -p "$out" && cd "$out" && pwd -P)

for b in coredns caddy coral-check; do
	[ -x "bin/$b" ] || { echo "build-packages.sh: bin/$b missing (make $b)" >&2; exit 1; }
done

if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
if [ -z "${CORAL_VERSION:-}" ]; then
	rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
	CORAL_VERSION="0.0~git$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y%m%d%H%M%S).$rev"
fi
export CORAL_VERSION
export CORAL_ARCH=${CORAL_ARCH:-$(go env GOARCH)}
# The maintainer scripts' modes go into the package as they are in the work
# tree; a checkout with another umask must not change the bytes.
chmod 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm

# The copyright files, naming the programs as installed, and the nfpm
# configurations pointed at them: each run its own, so that two builds at
# once (make packages beside test/deploy) do not share a file.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$root/bin/coredns" "$work/coral-coredns"
ln -s "$root/bin/coral-check" "$work/coral-check"
ln -s "$root/bin/caddy" "$work/coral-caddy"
bash deploy/copyright.sh "$work/coral-coredns" "$work/coral-check" >"$work/coral-dns.copyright"
bash deploy/copyright.sh "$work/coral-caddy" >"$work/coral-proxy.copyright"

for pkg in coral-dns coral-proxy; do
	target="$out/${pkg}_${CORAL_VERSION}_${CORAL_ARCH}.deb"
	sed "s|@COPYRIGHT@|$work/$pkg.copyright|" "deploy/nfpm/$pkg.yaml" >"$work/$pkg.yaml"
	go tool nfpm package --packager deb --config "$work/$pkg.yaml" --target "$target" >&2
	echo "$target"
done
