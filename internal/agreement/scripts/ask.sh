#!/bin/sh
# What Ask reads of a run (askScript), a "key=value" line each, "end=."
# last. The run's directory is made as its lease begins: a host without it
# lost the run's records (it rebooted, or /run was emptied, since), which
# nothing of the run can add to again (its lease is gone with them).
d={{q .Dir}}
[ -d "$d" ] || echo lost=yes
# First, cancel the actions named (Cancel) that have not started: their
# fate is one link, made once ("cancelled <action>" in the run's log).
{{if .Cancel}}{{logfn}}
if [ -d "$d" ]; then :{{range .Cancel}}; ln -s {{$.Cancelled}} "$d"/{{q (print . ".fate")}} 2>/dev/null && fleet_log "$d" cancelled {{q .}}{{end}}; fi
{{end -}}
# The run's records first, what the host runs after: a record is written
# once its switch is done, so the system read after it is never one from
# before that switch.
fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null; echo "lease=$fleet_t"
for f in "$d"/*.fate; do [ -L "$f" ] && echo "fate=$(basename "$f" .fate) $(readlink "$f")"; done
for f in "$d"/*.pid; do [ -f "$f" ] && read -r p < "$f" && kill -0 "$p" 2>/dev/null && echo "acting=$(basename "$f" .pid)"; done
for k in activated watchdog rolledback; do v=; [ -f "$d/$k" ] && read -r v < "$d/$k" && echo "$k=$v"; done
[ -L "$d/decision" ] && echo "decision=$(readlink "$d/decision")"
for f in "$d"/activated.*; do [ -f "$f" ] && read -r v < "$f" && echo "attempt=${f##*.} $v"; done
for f in "$d"/booted.*; do [ -f "$f" ] && read -r v < "$f" && echo "booted=${f##*.} $v"; done
[ -f "$d/output" ] && tail -n 3 "$d/output" | sed 's/^/output=/'
# No actor of any run holds the guard.
if flock -n -x {{.GuardFile}} true 2>/dev/null; then echo released=yes; fi
echo "current=$(readlink -e /run/current-system)"
echo "profile=$(readlink -f {{.ProfilePath}})"
# The last system a run finished with a passing verdict, read with the
# shell's builtins only (as readSucceeded).
fleet_ok=; read -r fleet_ok 2>/dev/null <{{.SucceededFile}} || read -r fleet_ok 2>/dev/null <{{.StateDir}}/succeeded; echo "succeeded=$fleet_ok"
echo end=.
