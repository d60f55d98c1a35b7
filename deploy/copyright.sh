#!/usr/bin/env bash
# Writes the Debian copyright file (machine-readable format 1.0) of a
# package made of the given Go binaries: Coral's own licence, then one
# stand-alone licence paragraph for Go itself and for every module
# compiled into them (`go version -m`), with its SPDX name and the licence
# text from the module cache. The BSD, MIT and ISC licences of many of
# them ask that their text go with every binary; this is where it goes.
# A module without a licence file, or one whose licence it cannot name,
# fails the build.
# deploy/build-packages.sh runs it; the same binaries give the same bytes.
#
#   deploy/copyright.sh BINARY... > copyright
set -euo pipefail

modcache=$(go env GOMODCACHE)
goroot=$(go env GOROOT)

# spdx names the licence of a licence file from its text.
spdx() {
	local f=$1
	if grep -q 'Apache License' "$f" && grep -q 'Version 2\.0' "$f"; then echo Apache-2.0
	elif grep -q 'Mozilla Public License' "$f" && grep -q 'Version 2\.0\|version 2\.0' "$f"; then echo MPL-2.0
	elif grep -q 'Permission is hereby granted, free of charge' "$f"; then echo MIT
	elif grep -q 'Permission to use, copy, modify, and/or distribute\|Permission to use, copy, modify, and distribute' "$f"; then echo ISC
	elif grep -q 'Redistribution and use' "$f" && grep -qi 'neither the name\|names of its contributors\|name of the copyright holder' "$f"; then echo BSD-3-Clause
	elif grep -q 'Redistribution and use' "$f"; then echo BSD-2-Clause
	elif grep -q 'CC0\|Creative Commons' "$f"; then echo CC0-1.0
	else echo unknown
	fi
}

# licence_file finds a module directory's licence file.
licence_file() {
	find "$1" -maxdepth 1 -type f \( -iname 'licen[cs]e*' -o -iname 'copying*' \) -print 2>/dev/null | LC_ALL=C sort | sed -n 1p
}

# paragraph writes one stand-alone licence paragraph: the text indented by
# one space, empty lines as " .".
# The Apache and Mozilla licences are in /usr/share/common-licenses on
# every Debian system: those are named, not repeated.
paragraph() {
	local file=$1 comment=$2 name
	name=$(spdx "$file")
	printf 'License: %s\n' "$name"
	case $name in
	Apache-2.0 | MPL-2.0)
		printf ' On Debian systems, the full text of this licence is in\n /usr/share/common-licenses/%s.\n' "$name"
		;;
	*) sed -e 's/[[:space:]]*$//' -e 's/^$/./' -e 's/^/ /' "$file" ;;
	esac
	printf 'Comment: %s\n\n' "$comment"
}

cat <<'HEAD'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: Coral
Upstream-Contact: Coral developers <noreply@coralcdn.invalid>
Source: https://github.com/coralcdn/coral
Comment: The programs are statically linked Go binaries. Below Coral's own
 licence, each paragraph is the licence of Go or of one Go module compiled
 into them, as the module ships it, with the module and version named in
 its Comment.

Files: *
Copyright: Coral developers
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0, is
 in /usr/share/common-licenses/Apache-2.0.

HEAD

paragraph "$goroot/LICENSE" "Go $(go env GOVERSION): the runtime and standard library."

# Every module of every binary, once: path and version, with replacements
# to a local directory (Coral itself, above) left out.
for bin in "$@"; do
	go version -m "$bin" | awk '
		function flush() { if (pending) print path, ver; pending = 0 }
		$1 == "dep" { flush(); path = $2; ver = $3; pending = 1; next }
		$1 == "=>" { if ($2 ~ /^[.\/]/) pending = 0; else { path = $2; ver = $3 }; next }
		{ flush() }
		END { flush() }' | sed "s|\$| ${bin##*/}|"
done | LC_ALL=C sort | awk '
	$1 " " $2 == last { bins = bins ", " $3; next }
	{ if (last != "") print last, bins; last = $1 " " $2; bins = $3 }
	END { if (last != "") print last, bins }' |
while read -r path ver bins; do
	escaped=$(printf '%s' "$path" | sed 's/[A-Z]/!\L&/g')
	dir="$modcache/$escaped@$ver"
	file=$(licence_file "$dir")
	if [ -z "$file" ]; then
		echo "copyright.sh: no licence file for $path $ver in $dir" >&2
		exit 1
	fi
	if [ "$(spdx "$file")" = unknown ]; then
		echo "copyright.sh: cannot name the licence of $path $ver ($file)" >&2
		exit 1
	fi
	paragraph "$file" "Go module $path $ver, compiled into ${bins//,/, }."
done
