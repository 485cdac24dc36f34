#!/bin/sh
# The act command (Activation.Script), after fleet_fence's definition
# (fence.sh): fenced as act.<attempt>, its pid recorded (act.<attempt>.pid:
# a watchdog cancels a first attempt whose command ended without starting
# it).
fleet_fence {{q .Run}} act.{{.Attempt}}
echo $$ > {{q .Dir}}/act.{{.Attempt}}.pid
# The first attempt only: the system profile (Profile, unless goal test)...
{{if .Profile}}{{.Profile}}
{{end -}}
# ... and the watchdog, which must hold the guard before the activation
# may start (StartWatchdog, start_watchdog.sh).
{{if .StartWatchdog}}(
{{.StartWatchdog}}
) || { echo {{q .PrepareFailed}} >&2; exit 1; }
{{end -}}
# The activation (unit.sh), through systemd-run where systemd runs, so
# that it outlives the session (at most 180 s in a container).
{{if .Systemd}}systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit={{q .Unit}}{{if .Container}} -p RuntimeMaxSec=180{{end}} {{end}}sh -c {{q .UnitScript}}
