#!/usr/bin/env bash
# The `go` that build.sh makes xcaddy run (XCADDY_WHICH_GO). xcaddy has no
# options for the two things it does besides passing every command on to the
# real go (see README.md):
#
#   go mod init   After it, our go.sum is copied into the new module, so the
#                 modules we already pin are checked against our hashes and no
#                 checksum-database lookup is needed for them, and the new
#                 module gets our go.mod's go line (go mod init writes the
#                 toolchain's own version; the go line sets the language
#                 version and the default GODEBUG settings of the binary).
#   go mod edit   A -replace to a directory inside our repository is written
#                 as a path relative to xcaddy's module directory. xcaddy turns
#                 every replacement into an absolute path, and the go command
#                 writes the path into the binary's build info as it stands in
#                 go.mod, so the bytes would depend on where the checkout is.
#                 The replaced module is also required at the zero
#                 pseudo-version (what go itself would add) right away, so that
#                 xcaddy's `go get` finds the plugin's packages in it instead of
#                 asking the module proxy about every longer module path first
#                 (github.com/coralcdn/coral/module/caddy, ...); a proxy that
#                 answers those with anything but 404/410 stops the build.
#
# Environment (set by build.sh): CORAL_CADDY_GO, the real go binary;
# CORAL_CADDY_ROOT, the repository root (a physical path).
set -euo pipefail

go=${CORAL_CADDY_GO:?set by build.sh}
root=${CORAL_CADDY_ROOT:?set by build.sh}

echo "go-shim: go $*" >&2

if [ "${1-}" = mod ] && [ "${2-}" = init ]; then
	"$go" "$@"
	cp "$root/go.sum" go.sum
	go_line=$(awk '$1 == "go" { print $2; exit }' "$root/go.mod")
	"$go" mod edit -go="$go_line"
	exit 0
fi

if [ "${1-}" = mod ] && [ "${2-}" = edit ]; then
	args=()
	require_zero=()
	for a in "$@"; do
		case $a in
		*=/*)
			dir=${a#*=}
			case $(realpath -m "$dir")/ in
			"$root"/*)
				rel=$(realpath -m --relative-to="$(pwd -P)" "$dir")
				case $rel in ../* | .) ;; *) rel="./$rel" ;; esac
				a="${a%%=*}=$rel"
				echo "go-shim: replacement written as $a" >&2
				require_zero+=("${a%%=*}")
				;;
			esac
			;;
		esac
		args+=("$a")
	done
	"$go" "${args[@]}"
	for m in "${require_zero[@]}"; do
		case $m in *@*) continue ;; esac # a replacement of one version only
		major=v0
		if [[ $m =~ /(v[2-9]|v[1-9][0-9]+)$ ]]; then major=${BASH_REMATCH[1]}; fi
		echo "go-shim: go mod edit -require=$m@$major.0.0-00010101000000-000000000000" >&2
		"$go" mod edit "-require=$m@$major.0.0-00010101000000-000000000000"
	done
	exit 0
fi

exec "$go" "$@"
