#!/bin/sh
# The activation itself (unitScript), one attempt of it: run by sh -c, as
# a transient unit where systemd runs. Its lines are joined into one
# ("; "): systemd-run writes it into the unit's file, where a line of its
# own would be read as the file's. So: no line may end in a way "; "
# cannot follow (then, do, &, a here-document...).
#
# Under the guard (shared), like any fenced action.
d={{q .Dir}}; exec 8>>{{.GuardFile}} && flock -s 8 || exit 1
{{logfn}}
fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null
# Its pid first, so that a started attempt always names one: read from
# /proc/self/stat by the shell itself, not written as $$, which systemd
# turns into "$" in a unit's command line (the watchdog would take the
# attempt for ended, and switch back while it still runs).
fleet_me=; read -r fleet_me fleet_x < /proc/self/stat; echo "$fleet_me" > "$d/unit.{{.Attempt}}.pid"
# It starts only under the run's lease (the lease file names the run, and
# a keeper holds the lock), claiming its fate unit.<attempt> (a deployer
# that gave up on it before it started cancelled it, and so does a
# watchdog that decided), unless the run is decided already.
if [ "$fleet_t" != {{q .Run}} ]; then echo "{{.FencedMarker}}this deployer's lease on the host's deploy lock ended before the activation started" > "$d/output"; rc={{.FencedExit}}; fleet_log "$d" refused unit.{{.Attempt}} lease "$fleet_t"
elif flock -n -s {{.LockFile}} true 2>/dev/null; then echo "{{.FencedMarker}}no deployment holds the host's deploy lock: this deployer's lease on it ended before the activation started" > "$d/output"; rc={{.FencedExit}}; fleet_log "$d" refused unit.{{.Attempt}} no-lease
elif ! ln -s started "$d/unit.{{.Attempt}}.fate" 2>/dev/null; then echo "{{.FencedMarker}}the activation was cancelled before it started" > "$d/output"; rc={{.FencedExit}}; fleet_log "$d" refused unit.{{.Attempt}} fate "$(readlink "$d/unit.{{.Attempt}}.fate")"
elif [ -L "$d/decision" ]; then echo "{{.FencedMarker}}the activation was decided on before it started" > "$d/output"; rc={{.FencedExit}}; fleet_log "$d" refused unit.{{.Attempt}} decided "$(readlink "$d/decision")"
# The switch ("started unit.<attempt>" in the run's log), its output to a file on the host (a dropped session cannot
# end it through a broken pipe); its pid (unit.<attempt>.stc) tells a
# watchdog that switches back what to stop.
else fleet_log "$d" started unit.{{.Attempt}}; {{q .System}}/bin/switch-to-configuration test >"$d/output" 2>&1 & echo $! > "$d/unit.{{.Attempt}}.stc"; wait $!; rc=$?; fi
# The exit status, the attempt's (activated.<attempt>) and, unless the
# switch lock was held (the deployer tries again), the activation's
# (activated: the watchdog's "the activation has ended"). A record that
# cannot be written fails the attempt. The log says how it ended
# ("ended unit.<attempt> <status>"; a refusal, "refused unit.<attempt>"
# and why).
{ echo "$rc" > "$d/activated.{{.Attempt}}" && { [ "$rc" = {{.SwitchLockedExit}} ] || echo "$rc" > "$d/activated"; }; } || { echo {{q .RecordFailed}} >> "$d/output"; echo 1 > "$d/activated"; rc=1; }
fleet_log "$d" ended unit.{{.Attempt}} "$rc"
# Wake the watchdog; the output's last lines for the deployer.
[ ! -p "$d/wake" ] || printf 'a\n' 1<>"$d/wake"; tail -n 5 "$d/output" >&2; exit "$rc"
