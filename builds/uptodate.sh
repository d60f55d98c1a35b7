# Sourced by caddy/build.sh and coredns/build.sh (bash): exits the build
# early when the binary is newer than everything it is built from.
#
#	exit_if_up_to_date OUT PACKAGE [EXTRA_FILE...]
#
# The inputs are the files the binary is built from: the Go files (tests
# excluded) and embedded files of our packages PACKAGE imports, their
# directories (a deleted file changes the directory), go.mod, go.sum and
# the build scripts (EXTRA_FILE...). If go list fails (a broken tree),
# every file of ours counts, and the build reports the error. FORCE=1
# always rebuilds. Needs $root and log().
exit_if_up_to_date() {
	local out=$1 pkg=$2 name inputs newer
	shift 2
	name=${out#"$root"/}
	if [ "${FORCE:-0}" = 1 ] || [ ! -f "$out" ]; then
		return
	fi
	if inputs=$(cd "$root" && go list -deps -f '{{if .Module}}{{if eq .Module.Path "github.com/coralcdn/coral"}}{{.Dir}}
{{range .GoFiles}}{{$.Dir}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$.Dir}}/{{.}}
{{end}}{{end}}{{end}}' "$pkg" 2>/dev/null); then
		newer=$(printf '%s\n' "$inputs" "$root/go.mod" "$root/go.sum" "$@" \
			| xargs -d '\n' -I{} find {} -maxdepth 0 -newer "$out" -print 2>/dev/null || true)
		newer=${newer%%$'\n'*} # the first one
	else
		newer=$root
	fi
	if [ -z "$newer" ]; then
		log "$name is up to date (FORCE=1 to rebuild)"
		exit 0
	fi
	log "rebuilding: $newer is newer than $name"
}
