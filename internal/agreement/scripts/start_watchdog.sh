#!/bin/sh
# Start the run's watchdog (startWatchdog) in the background, so that it
# survives the session. Its script is a file of the run's directory, run
# by sh: given to systemd-run on its command line, its lines would be
# written into the transient unit's file and read as the file's.
printf '%s\n' {{q .Script}} > {{q .File}} || exit 1
# A transient unit where systemd runs; elsewhere only the background
# command itself, with every stream redirected: a backgrounded list would
# keep the session's output open.
{{if .Systemd}}systemd-run --collect --quiet --no-ask-password --unit={{q .Unit}} sh {{q .File}} || exit 1
{{- else}}nohup sh {{q .File}} </dev/null >/dev/null 2>&1 &
{{- end}}
# Wait up to ten seconds for it to hold the guard ("guarded").
n=0; while [ ! -e {{q .Dir}}/guarded ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; [ -e {{q .Dir}}/guarded ]
