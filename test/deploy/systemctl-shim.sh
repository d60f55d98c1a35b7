#!/usr/bin/env bash
# systemctl for TestWalkthrough's lab, where no systemd runs: start, stop,
# reload, enable --now and disable --now of the installed units, carried
# out as systemd would for what the units say: ExecStart and ExecReload
# ($MAINPID), User and Group, the user's HOME and Environment, WorkingDirectory,
# StateDirectory, CacheDirectory and RuntimeDirectory (created, owned by
# the user, RuntimeDirectoryMode), the
# ambient capabilities and NoNewPrivileges. The sandboxing directives are
# left to systemd-analyze (TestUnitsSecurity). A node's pid files and logs
# go to /run/coral-lab, which the lab mounts per node.
set -euo pipefail

run=/run/coral-lab
cmd=${1:?usage: systemctl start|stop|reload|enable --now|disable --now UNIT...}
shift
case $cmd in
enable | disable)
	[ "${1:-}" = --now ] || { echo "systemctl (lab): only $cmd --now" >&2; exit 1; }
	shift
	[ "$cmd" = enable ] && cmd=start || cmd=stop
	;;
esac

val() { sed -n "s/^$1=//p" "$file"; }

for unit in "$@"; do
	unit=${unit%.service}
	file=/lib/systemd/system/$unit.service
	[ -f "$file" ] || { echo "systemctl (lab): no $file" >&2; exit 5; }
	user=$(val User)
	group=$(val Group)
	caps=$(val AmbientCapabilities | tr 'A-Z' 'a-z' | sed -e 's/cap_/+/g' -e 's/ /,/g')
	# As systemd does for User=: HOME, USER, LOGNAME and SHELL from the
	# user's entry (for coral, HOME=/nonexistent), then the unit's
	# Environment= lines over them.
	IFS=: read -r _ _ _ _ _ home shell < <(getent passwd "$user")
	env=("HOME=$home" "USER=$user" "LOGNAME=$user" "SHELL=$shell")
	mapfile -t -O 4 env < <(val Environment)
	pidfile=$run/$unit.pid
	as_unit() {
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${env[@]}" \
			setpriv --reuid="$user" --regid="$group" --init-groups --no-new-privs \
			--inh-caps="$caps" --ambient-caps="$caps" -- "$@"
	}
	case $cmd in
	start)
		for d in $(val StateDirectory); do install -d -o "$user" -g "$group" -m 0755 "/var/lib/$d"; done
		for d in $(val CacheDirectory); do install -d -o "$user" -g "$group" -m 0755 "/var/cache/$d"; done
		rmode=$(val RuntimeDirectoryMode)
		for d in $(val RuntimeDirectory); do install -d -o "$user" -g "$group" -m "${rmode:-0755}" "/run/$d"; done
		read -r -a exec <<<"$(val ExecStart)"
		# The subshell becomes the service's process (exec all the way).
		(cd "$(val WorkingDirectory)" && exec setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${env[@]}" \
			setpriv --reuid="$user" --regid="$group" --init-groups --no-new-privs \
			--inh-caps="$caps" --ambient-caps="$caps" -- "${exec[@]}") >>"$run/$unit.log" 2>&1 </dev/null &
		echo $! >"$pidfile"
		;;
	reload)
		pid=$(cat "$pidfile")
		read -r -a exec <<<"$(val ExecReload | sed "s/\\\$MAINPID/$pid/g")"
		(cd "$(val WorkingDirectory)" && as_unit "${exec[@]}")
		;;
	stop)
		[ -f "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "systemctl (lab): $unit ($pid) did not stop in 30 s" >&2
			exit 1
		fi
		rm -f "$pidfile"
		;;
	*)
		echo "systemctl (lab): $cmd is not supported" >&2
		exit 1
		;;
	esac
done
