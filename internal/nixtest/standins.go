package nixtest

// The stand-ins are POSIX sh scripts in the target's bin directory, first on
// its sessions' PATH. They keep their state under stateLink, the target's
// state directory as seen inside its namespace, where the test reads it.
//
// Units started by systemd-run are detached from the SSH session (setsid -f:
// reparented away from sshd, in a session of their own), so they outlive a
// dropped connection as a transient unit does; the target kills whatever is
// left in its namespace when the test ends. Like a unit, they get a clean
// environment (PATH, NIX_CONF_DIR and what -E sets), not the caller's.

// noSystemd is what systemctl and systemd-run say where systemd is not PID 1.
const noSystemd = `no_systemd() {
	echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
	echo "Failed to connect to bus: Host is down" >&2
	exit 1
}
[ -d /run/systemd/system ] || no_systemd
`

// unitName normalises a unit name as systemd does: no suffix means
// .service. It sets un rather than printing, so that a caller needs no
// subshell: the stand-ins run on every activation, and a fork costs.
const unitName = `unit_name() {
	case "$1" in
	*.service|*.scope|*.timer|*.socket|*.target|*.mount|*.path|*.slice) un=$1 ;;
	*) un=$1.service ;;
	esac
}
`

const systemdRunScript = `#!/bin/sh
# nixtest stand-in for systemd-run: runs the command detached, like a
# transient service unit, and records how it was asked to.
state=` + stateLink + `
` + noSystemd + unitName + `
unit= pipe=0 quiet=0 wait=0 collect=0 max=0 props= flags= env=
nl='
'
# A unit does not inherit the caller's environment, only what -E sets.
setenv() {
	case "$1" in
	[A-Za-z_]*=*) env="$env$1$nl" ;;
	*) echo "systemd-run (nixtest stand-in): --setenv $1: only NAME=VALUE is supported" >&2; exit 1 ;;
	esac
}
while [ $# -gt 0 ]; do
	case "$1" in
	--) shift; break ;;
	-u|--unit) unit=$2; shift ;;
	--unit=*) unit=${1#--unit=} ;;
	-p|--property) props="$props$2$nl"; shift ;;
	--property=*) props="$props${1#--property=}$nl" ;;
	-p*) props="$props${1#-p}$nl" ;;
	-P|--pipe) pipe=1; flags="$flags$1$nl" ;;
	-q|--quiet) quiet=1; flags="$flags$1$nl" ;;
	-G|--collect) collect=1; flags="$flags$1$nl" ;;
	--wait) wait=1; flags="$flags$1$nl" ;;
	--no-ask-password|--no-block|--service-type=*|--description=*) flags="$flags$1$nl" ;;
	-E|--setenv) setenv "$2"; flags="$flags$1$nl$2$nl"; shift ;;
	--setenv=*) setenv "${1#--setenv=}"; flags="$flags$1$nl" ;;
	-*) echo "systemd-run (nixtest stand-in): unsupported option $1" >&2; exit 1 ;;
	*) break ;;
	esac
	shift
done
if [ $# -eq 0 ]; then
	echo "Command line to execute required." >&2
	exit 1
fi
# systemd substitutes ${NAME} in a unit's command line from its environment
# before it runs it (a $ needs $$): a command holding one would not run as
# written.
case "$*" in *'${'*)
	echo "systemd-run (nixtest stand-in): the command line holds \${...}, which systemd would substitute from the unit's environment" >&2
	exit 1 ;;
esac
# And it turns each "$$" into "$": a command that wrote its own pid as
# $$ writes "$" under systemd.
n=$#; i=0
while [ $i -lt $n ]; do
	a=$1; shift; out=
	while :; do
		case "$a" in
		*'$$'*) out="$out${a%%\$\$*}\$"; a=${a#*\$\$} ;;
		*) out="$out$a"; break ;;
		esac
	done
	set -- "$@" "$out"; i=$((i + 1))
done
set -f; ifs=$IFS; IFS=$nl
for p in $props; do
	case "$p" in
	RuntimeMaxSec=*) p=${p#RuntimeMaxSec=} ;;
	*) continue ;;
	esac
	case "${p%s}" in
	*[!0-9]*|'') echo "systemd-run (nixtest stand-in): RuntimeMaxSec=$p: only whole seconds (N or Ns) are supported" >&2; exit 1 ;;
	*) max=${p%s} ;;
	esac
done
IFS=$ifs; set +f
[ -n "$unit" ] || unit=run-u$$
unit_name "$unit"; unit=$un

# The record, one directory per call, named so that they sort by time.
rec="$state/systemd-run/$(date +%s%N)-$$"
mkdir -p "$rec"
printf '%s\n' "$unit" > "$rec/unit"
printf '%s' "$flags" > "$rec/flags"
printf '%s' "$props" > "$rec/props"
for a in "$@"; do printf '%s\n' "$a"; done > "$rec/argv"

dir="$state/units/$unit"
if [ -d "$dir" ]; then
	if [ ! -e "$dir/exit" ] || { [ "$(cat "$dir/result")" != success ] && [ ! -e "$dir/collect" ]; }; then
		echo "Failed to start transient service unit: Unit $unit was already loaded or has a fragment file." >&2
		exit 1
	fi
	rm -rf "$dir"
fi
mkdir -p "$dir"
[ "$collect" = 1 ] && : > "$dir/collect"
printf '%s' "$env" > "$dir/env"
echo "Started $unit." >> "$dir/journal"

# A unit inherits none of its caller's descriptors but what --pipe
# passes (standard input, output and error): not a lock its caller holds.
run() {
	setsid -f env -i PATH=` + SessionPath + ` NIX_CONF_DIR=` + stateLink + `/etc/nix \
		"$state/libexec/unit-runner" "$dir" "$max" "$@" 3>&- 4>&- 6>&- 7>&- 8>&- 9>&-
}
if [ "$pipe" = 1 ] || [ "$wait" = 1 ]; then
	# Like the real client, it waits for the unit without polling: the
	# runner writes a line to this FIFO once it has recorded the exit
	# status, and the client holds the FIFO open from before the start,
	# so the line is never lost.
	mkfifo "$dir/done" && exec 5<>"$dir/done" || exit 1
fi
if [ "$pipe" = 1 ]; then
	run "$@" 5>&-
else
	run "$@" </dev/null >>"$dir/journal" 2>&1 5>&-
	# Back once the unit is known to systemd (its start job queued, or
	# it runs): a stop that follows finds it.
	n=0
	while [ ! -e "$dir/pid" ] && [ $n -lt 500 ]; do sleep 0.01; n=$((n + 1)); done
fi
if [ "$pipe" = 1 ] || [ "$wait" = 1 ]; then
	read -r _ <&5
	read -r st <"$dir/exit"
	exit "$st"
fi
[ "$quiet" = 1 ] || echo "Running as unit: $unit" >&2
exit 0
`

// unitRunnerScript runs one unit's command and records how it ended, the
// way systemd-run reports it: success 0, an exit code as itself, a runtime
// limit as 1 (result "timeout"), death by another signal than the clean
// ones as 255.
const unitRunnerScript = `#!/bin/sh
dir=$1 max=$2
shift 2
unit=${dir##*/}
# The runner is systemd's, not the client's: the signals of the session
# that started the unit (a dropped SSH session, a broken pipe) do not end
# it, as they do not end a unit. Caught, not ignored: an ignored signal
# would stay ignored in the unit's command.
trap : HUP INT PIPE
while IFS= read -r kv; do
	export "$kv"
done < "$dir/env"
# Which unit a switch-to-configuration ran in, for Target.Events.
export NIXTEST_UNIT="$unit"
# A busy systemd starts a unit late (Target.SetUnitStartDelay): its start
# job waits, and a stop meanwhile cancels it (the group's TERM ends the
# wait, and the runner notes it).
delay=
[ ! -f ` + stateLink + `/unit-start-delay ] || read -r delay < ` + stateLink + `/unit-start-delay
if [ -n "$delay" ]; then
	echo $$ > "$dir/pid"
	cancelled=
	trap 'cancelled=1' TERM
	sleep "$delay"
	trap - TERM
	if [ -n "$cancelled" ]; then
		echo "$unit: start job canceled" >> "$dir/journal"
		echo canceled > "$dir/result"
		echo 1 > "$dir/exit.tmp"
		mv "$dir/exit.tmp" "$dir/exit"
		if [ -p "$dir/done" ]; then
			exec 4<>"$dir/done" && echo >&4
		fi
		exit 0
	fi
fi
# An asynchronous command gets /dev/null as stdin unless told otherwise.
exec 3<&0
# timeout puts the command in a process group of its own, which
# systemctl stop signals; 0 means no limit.
timeout -k 5 "$max" "$@" <&3 3<&- &
main=$!
exec 3<&-
echo "$main" > "$dir/pid"
wait "$main"
st=$?
# A caught signal ends the wait, not the command: wait again.
while [ "$st" -gt 128 ] && kill -0 "$main" 2>/dev/null; do
	wait "$main"
	st=$?
done
if [ "$max" -gt 0 ] && [ "$st" -eq 124 ]; then
	result=timeout client=1
	echo "$unit: Service reached runtime time limit. Stopping."
	echo "$unit: Failed with result 'timeout'."
elif [ "$st" -eq 0 ] || [ "$st" -eq 129 ] || [ "$st" -eq 130 ] || [ "$st" -eq 141 ] || [ "$st" -eq 143 ]; then
	# SIGHUP, SIGINT, SIGPIPE and SIGTERM are clean exits for systemd
	# (systemctl stop sends SIGTERM).
	result=success client=0
	echo "$unit: Deactivated successfully."
elif [ "$st" -gt 128 ]; then
	result=signal client=255
	echo "$unit: Main process exited, code=killed, status=$((st - 128))"
	echo "$unit: Failed with result 'signal'."
else
	result=exit-code client=$st
	echo "$unit: Main process exited, code=exited, status=$st"
	echo "$unit: Failed with result 'exit-code'."
fi >> "$dir/journal"
echo "$result" > "$dir/result"
echo "$client" > "$dir/exit.tmp"
mv "$dir/exit.tmp" "$dir/exit"
# A waiting client reads this; opened read-write, it never blocks.
if [ -p "$dir/done" ]; then
	exec 4<>"$dir/done" && echo >&4
fi
`

const systemctlScript = `#!/bin/sh
# nixtest stand-in for systemctl: the system state, failed units, and the
# transient units systemd-run started.
state=` + stateLink + `
printf '%s\n' "$*" >> "$state/systemctl.log"
` + noSystemd + unitName + `
quiet=0 wait=0 failed=0 inhibitors=1 verb=
set -- "$@" --nixtest-end
while [ "$1" != --nixtest-end ]; do
	case "$1" in
	-q|--quiet) quiet=1 ;;
	--wait) wait=1 ;;
	-i|--ignore-inhibitors|--check-inhibitors=no) inhibitors=0 ;;
	--check-inhibitors=*) ;;
	--failed|--state=failed) failed=1 ;;
	--no-pager|--plain|--no-legend|--full|-l|--all|-a|--system|--no-ask-password|--type=*|--output=*) ;;
	--) ;;
	-*) echo "systemctl (nixtest stand-in): unsupported option $1" >&2; exit 1 ;;
	*) if [ -z "$verb" ]; then verb=$1; else set -- "$@" "$1"; fi ;;
	esac
	shift
done
shift # --nixtest-end; what is left are the verb's arguments

failed_units() { cat "$state/failed-units" 2>/dev/null; }

# system_state sets s, with builtins only.
system_state() {
	s=
	[ -f "$state/system-state" ] && read -r s <"$state/system-state"
	if [ -n "$s" ]; then :
	elif [ -s "$state/failed-units" ]; then s=degraded
	else s=running
	fi
}

unit_state() {
	d="$state/units/$1"
	if [ -d "$d" ] && [ ! -e "$d/exit" ]; then echo active
	elif [ -d "$d" ] && [ "$(cat "$d/result")" != success ] && [ "$(cat "$d/result")" != canceled ]; then echo failed
	elif failed_units | grep -qxF "$1"; then echo failed
	else echo inactive
	fi
}

[ -n "$verb" ] || { [ "$failed" = 1 ] && verb=list-units; }
case "$verb" in
is-system-running)
	system_state
	if [ "$wait" = 1 ]; then
		while [ "$s" = initializing ] || [ "$s" = starting ]; do
			sleep 0.05
			system_state
		done
	fi
	[ "$quiet" = 1 ] || echo "$s"
	[ "$s" = running ]
	exit
	;;
list-units)
	# --plain --no-legend form: unit load active sub description
	if [ -f "$state/failed-units" ]; then
		while read -r u; do
			[ -n "$u" ] && printf '%s loaded failed failed %s\n' "$u" "$u"
		done <"$state/failed-units"
	fi
	for d in "$state"/units/*; do
		[ -e "$d/exit" ] || continue
		read -r r <"$d/result"
		[ "$r" = success ] && continue
		printf '%s loaded failed failed %s\n' "${d##*/}" "${d##*/}"
	done
	exit 0
	;;
is-active|is-failed)
	rc=3
	[ "$verb" = is-failed ] && rc=1
	for u in "$@"; do
		unit_name "$u"
		s=$(unit_state "$un")
		[ "$quiet" = 1 ] || echo "$s"
		if [ "$verb" = is-active ] && [ "$s" = active ]; then rc=0; fi
		if [ "$verb" = is-failed ] && [ "$s" = failed ]; then rc=0; fi
	done
	exit $rc
	;;
stop|kill)
	for u in "$@"; do
		unit_name "$u"
		d="$state/units/$un"
		[ -e "$d/pid" ] && [ ! -e "$d/exit" ] || continue
		kill -TERM "-$(cat "$d/pid")" 2>/dev/null
		if [ "$verb" = stop ]; then
			n=0
			while [ ! -e "$d/exit" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n + 1)); done
		fi
	done
	exit 0
	;;
reboot)
	# A target may refuse (Target.SetRebootRefusal): an inhibitor, no
	# logind, or a shutdown that hangs once it is accepted. The event
	# log says so.
	refusal=
	[ -f "$state/reboot-refusal" ] && read -r refusal < "$state/reboot-refusal"
	[ "$refusal" = inhibited ] && [ "$inhibitors" = 0 ] && refusal=
	case "$refusal" in
	inhibited|fails|hangs)
		printf '%s 0 reboot-refused %s\n' "$(date +%s.%N)" "$refusal" >> "$state/events.log" ;;
	esac
	case "$refusal" in
	inhibited)
		echo '` + RebootInhibitedMessage + `' >&2
		echo 'Please retry operation after closing inhibitors and logging out other users.' >&2
		echo "Alternatively, ignore inhibitors and users with 'systemctl reboot -i'." >&2
		exit 1 ;;
	fails)
		echo '` + RebootFailsMessage + `' >&2
		exit 1 ;;
	hangs)
		exit 0 ;;
	esac
	# The harness reboots the target (Target's reboot stand-in), as
	# systemd does once this returns, after its linger; the event log
	# says it was asked now, whose deploy lease held the host as it was
	# (Event.Lease), and which run's fenced script asked (Event.Unit: the
	# run whose reboot fate the host's fence claimed, once a boot; empty
	# for none).
	fleet_l=; read -r fleet_l _ 2>/dev/null < /run/fleet-deploy.lease
	fleet_r=; for f in /run/fleet-deploy/*/reboot.fate; do [ -L "$f" ] || continue; f=${f%/reboot.fate}; fleet_r=${f##*/}; done
	printf '%s 0 reboot-asked systemctl %s %s\n' "$(date +%s.%N)" "${fleet_l:--}" "${fleet_r:--}" >> "$state/events.log"
	printf 'asked=systemctl lease=%s run=%s\n' "$fleet_l" "$fleet_r" > "$state/reboot-request.$$" &&
		mv -f "$state/reboot-request.$$" "$state/reboot-request"
	exit 0
	;;
restart|try-restart)
	# Restarted units, in order (Target.Restarts); a unit SetRestartFails
	# named fails to restart, as a unit whose start fails does.
	rc=0
	for u in "$@"; do
		if [ -f "$state/restart-fails" ] && grep -qxF -- "$u" "$state/restart-fails"; then
			echo "Job for $u failed because the control process exited with error code." >&2
			echo "See \"systemctl status $u\" and \"journalctl -xeu $u\" for details." >&2
			rc=1
			continue
		fi
		printf '%s\n' "$u" >> "$state/restarts.log"
	done
	exit $rc
	;;
reset-failed)
	: > "$state/failed-units"
	for d in "$state"/units/*; do
		[ -e "$d/exit" ] && rm -rf "$d"
	done
	exit 0
	;;
'')
	echo "systemctl (nixtest stand-in): a verb is needed" >&2
	exit 1
	;;
*)
	echo "Unknown command verb '$verb'." >&2
	exit 1
	;;
esac
`

const journalctlScript = `#!/bin/sh
# nixtest stand-in for journalctl: -u UNIT prints what that transient unit
# logged; otherwise it prints what the last activation logged.
state=` + stateLink + `
` + unitName + `
unit=
while [ $# -gt 0 ]; do
	case "$1" in
	-u|--unit) unit=$2; shift ;;
	--unit=*) unit=${1#--unit=} ;;
	-n|--lines|-o|--output|--since|--until|-b|--boot)
		case "${2:-}" in -*|'') ;; *) shift ;; esac ;;
	-*) ;;
	esac
	shift
done
if [ -n "$unit" ]; then
	unit_name "$unit"
	f="$state/units/$un/journal"
else
	f="$state/activation.log"
fi
if [ -s "$f" ]; then cat "$f"; else echo "-- No entries --"; fi
`

const detectVirtScript = `#!/bin/sh
# nixtest stand-in for systemd-detect-virt: the container kind the target
# was given, and no virtual machine.
state=` + stateLink + `
mode=any quiet=0
for a in "$@"; do
	case "$a" in
	-c|--container) mode=container ;;
	-v|--vm) mode=vm ;;
	-q|--quiet) quiet=1 ;;
	*) echo "systemd-detect-virt (nixtest stand-in): unsupported option $a" >&2; exit 2 ;;
	esac
done
kind=
[ "$mode" = vm ] || kind=$(cat "$state/container" 2>/dev/null)
[ -n "$kind" ] || kind=none
[ "$quiet" = 1 ] || echo "$kind"
[ "$kind" != none ]
`
