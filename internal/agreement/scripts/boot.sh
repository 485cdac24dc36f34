#!/bin/sh
# The boot action (BootScript), after fleet_fence's definition (fence.sh).
fleet_fence {{q .Run}} boot.{{.Attempt}}
# The boot entry, bounded by timeout(1); its output to a file on the host
# (a dropped session cannot end it through a broken pipe).
timeout {{.Seconds}} {{q .System}}/bin/switch-to-configuration boot </dev/null >{{q .Dir}}/boot.{{.Attempt}}.output 2>&1; rc=$?
tail -n 5 {{q .Dir}}/boot.{{.Attempt}}.output >&2
fleet_log {{q .Dir}} ended boot.{{.Attempt}} "$rc"
# Its exit status (booted.<attempt>) and, on success, the system made the
# boot default and, but for goal boot (which judges nothing), the system
# that passed its verdict (Mark); a record that cannot be written fails
# it. The log says each record once it is written ("recorded boot-default
# <system>", "recorded succeeded <system>").
{ echo "$rc" > {{q .Dir}}/booted.{{.Attempt}} && { [ $rc -ne 0 ] || {{.Mark}}; }; } || { echo {{q .RecordFailed}} >&2; exit 1; }
exit $rc
