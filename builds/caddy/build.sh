#!/usr/bin/env bash
# Builds bin/caddy: stock Caddy plus the coral module, with xcaddy, reproducibly.
# See README.md beside this file. Env: FORCE=1 rebuilds even when up to date;
# GITCOMMIT overrides the version label baked into the binary.
set -euo pipefail

CADDY_VERSION=v2.11.9
XCADDY_VERSION=v0.4.5
CORAL_MODULE=github.com/coralcdn/coral
# The --with arguments: each Caddy plugin package goes into the generated
# main.go as a blank import. Ours comes from this working tree (the --replace
# below); a plugin from elsewhere is just `--with module/path@version`.
WITH=(--with "$CORAL_MODULE/module/caddy")
# Top-level directories whose Go files go into the binary (see the check after
# the build); a change in any of them makes bin/caddy out of date and -dirty.
INPUTS=(module coraldht coralname internal)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
work="$here/work"

# One build at a time per checkout: a second caller waits here, then finds
# the binary up to date (make test and an experiment may both ask).
exec 9>"$here/.build.lock"
flock 9
out="$root/bin/caddy"

die() { echo "build.sh: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

grep -qs "^module $CORAL_MODULE\$" "$root/go.mod" \
	|| die "cannot find the coral repository at $root"

# Pin the Go environment so the caller's settings cannot change the bytes.
# (The Go toolchain version itself is recorded in the binary and does matter.)
export CGO_ENABLED=0 GO111MODULE=on GOWORK=off GOFLAGS=
# xcaddy's own switches, which would change what it builds. (CADDY_VERSION
# needs no unset: the version argument below takes precedence over it.)
unset XCADDY_RACE_DETECTOR XCADDY_SKIP_BUILD XCADDY_DEBUG \
	XCADDY_GO_MOD_FLAGS XCADDY_SETCAP XCADDY_SUDO

# --- up to date? --------------------------------------------------------------
# shellcheck source=../uptodate.sh
. "$here/../uptodate.sh"
exit_if_up_to_date "$out" ./module/caddy "$here/build.sh" "$here/go-shim.sh" "$here/../uptodate.sh"

cd "$root"

# --- versions agree with our go.mod -------------------------------------------------
# Read-only queries (GOFLAGS is empty, so -mod=readonly): they never edit go.mod.
v=$(go list -m -f '{{.Version}}' github.com/caddyserver/caddy/v2) \
	|| die "github.com/caddyserver/caddy/v2 is not in go.mod"
[ "$v" = "$CADDY_VERSION" ] \
	|| die "go.mod has github.com/caddyserver/caddy/v2 $v, this script builds $CADDY_VERSION; change one of them"
v=$(go list -m -f '{{.Version}}' github.com/caddyserver/xcaddy) \
	|| die "github.com/caddyserver/xcaddy is not in go.mod (go get -tool github.com/caddyserver/xcaddy/cmd/xcaddy@$XCADDY_VERSION)"
[ "$v" = "$XCADDY_VERSION" ] \
	|| die "go.mod has github.com/caddyserver/xcaddy $v, this script expects $XCADDY_VERSION"

# --- label -----------------------------------------------------------------------
if [ -n "${GITCOMMIT:-}" ]; then
	label=$GITCOMMIT
elif rev=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null); then
	label="coral-$rev"
	if [ -n "$(git -C "$root" status --porcelain --untracked-files=normal -- \
		"${INPUTS[@]}" go.mod go.sum 2>/dev/null)" ]; then
		label="$label-dirty"
	fi
else
	label=coral-dev
fi
case $label in *[!A-Za-z0-9._+-]*) die "GITCOMMIT may only hold A-Z a-z 0-9 . _ + -" ;; esac

# --- fresh work dir ----------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# bin/caddy gets this time, not the time the build ended, so that a source
# edited while the build ran still counts as newer next time.
touch "$tmp/started"
# The module cache is read-only; make the old copy writable so rm works as non-root.
if [ -e "$work" ]; then chmod -R u+w "$work" 2>/dev/null || true; fi
rm -rf "$work"
mkdir -p "$work"

# --- build ---------------------------------------------------------------------
# xcaddy makes its module directory (main.go, go.mod, go.sum) with os.MkdirTemp,
# so TMPDIR puts it at work/buildenv_<date>.<random>: always three levels below
# the repository root, which the shim relies on for a fixed relative replace
# path. XCADDY_SKIP_CLEANUP keeps it there to look at; the go command's own
# scratch space stays outside the repository (GOTMPDIR).
#
# Setting XCADDY_GO_BUILD_FLAGS replaces xcaddy's defaults (-ldflags "-w -s"
# -trimpath -tags nobadger,nomysql,nopgx), so they are all repeated here. xcaddy
# also passes these flags to its `go get` and `go list` runs, which accept them.
flags="-trimpath -buildvcs=false -tags=nobadger,nomysql,nopgx"
flags="$flags -ldflags='-s -w -X github.com/caddyserver/caddy/v2.CustomVersion=$label'"

log "building Caddy $CADDY_VERSION + coral ($label) with xcaddy $XCADDY_VERSION"
# go tool builds xcaddy itself from go.mod's tool directive (read-only).
TMPDIR="$work" GOTMPDIR="$tmp" \
	XCADDY_WHICH_GO="$here/go-shim.sh" \
	CORAL_CADDY_GO="$(command -v go)" CORAL_CADDY_ROOT="$root" \
	XCADDY_SKIP_CLEANUP=1 XCADDY_GO_BUILD_FLAGS="$flags" \
	go tool xcaddy build "$CADDY_VERSION" \
	"${WITH[@]}" --replace "$CORAL_MODULE=$root" \
	--output "$work/caddy.bin"

# --- checks --------------------------------------------------------------------------
env_dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'buildenv_*' -print -quit)
[ -n "$env_dir" ] || die "xcaddy left no buildenv_* directory in $work"
# Run on a relative name: go version prints the file name on its first line.
info=$(cd "$work" && go version -m caddy.bin)

# The replacement must be the relative one the shim wrote, and no path of this
# machine may appear in the build info.
# (A here-string, not a pipe: with pipefail, grep -q leaving at the first
# match can kill a printf still writing, and the check fails at random.)
grep -qE "^[[:space:]]+=>[[:space:]]+\.\./\.\./\.\./\.\.[[:space:]]" <<<"$info" \
	|| die "the build info has no relative '=> ../../../..' replacement for $CORAL_MODULE:
$info"
if printf '%s\n' "$info" | grep -F -e "$root" -e "$work" -e "$(go env GOMODCACHE)" >/dev/null; then
	die "the build info contains a local path:
$info"
fi

# Every module in the binary must be at the version our own module graph
# selects (go list -m all, which is what our go.mod pins). The generated module
# requires coral, so our go.mod's requirements are part of its graph and MVS
# cannot pick anything older; this fails if something pulled a module newer,
# or brought in a module our graph does not have at all.
ours=$(go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all)
mismatch=$(printf '%s\n' "$info" | awk -v ours="$ours" -v self="$CORAL_MODULE" '
	BEGIN { n = split(ours, l, "\n"); for (i = 1; i <= n; i++) { split(l[i], f, " "); v[f[1]] = f[2] } }
	$1 == "dep" && $2 != self && !($2 in v) { print $2, $3, "is not in our module graph" }
	$1 == "dep" && ($2 in v) && v[$2] != $3 { print $2, $3, "but our go.mod has", v[$2] }')
[ -z "$mismatch" ] || die "the binary's module versions differ from ours (go get them in our go.mod):
$mismatch"

# Every coral package in the binary must live under one of INPUTS, or the
# up-to-date check and the -dirty label would miss its changes.
ours_with=()
for a in "${WITH[@]}"; do
	case $a in "$CORAL_MODULE"/*) ours_with+=("${a%%@*}") ;; esac
done
pkgs=$(go list -deps -f '{{with .Module}}{{if eq .Path "'"$CORAL_MODULE"'"}}{{$.ImportPath}}{{end}}{{end}}' \
	"${ours_with[@]}")
for p in $pkgs; do
	top=${p#"$CORAL_MODULE"/}
	top=${top%%/*}
	case " ${INPUTS[*]} " in *" $top "*) ;; *) die "$p is outside INPUTS (${INPUTS[*]}); add $top there" ;; esac
done

# At least one Caddy module must come from coral (list-modules --packages
# prints "<module id> <Go module path> [=> replacement]").
mods=$("$work/caddy.bin" list-modules --packages | awk -v m="$CORAL_MODULE" '$2 == m { print $1 }')
[ -n "$mods" ] || die "caddy list-modules shows no module from $CORAL_MODULE"
log "coral's Caddy modules: $(printf '%s\n' "$mods" | paste -sd ' ' -)"

mkdir -p "$root/bin"
mv -f "$work/caddy.bin" "$out"
touch -r "$tmp/started" "$out"
log "wrote $out"
if command -v sha256sum >/dev/null; then sha256sum "$out" >&2; fi
