#!/bin/sh
# The watchdog's last step before it switches back (stopAttempts): every
# attempt that started and has not ended (no activated.<attempt>) is
# stopped and waited for, so that the switch back is the run's last.
for f in "$d"/unit.*.fate; do
[ "$(readlink "$f")" = started ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2); fleet_k=0 fleet_x=
# Every 0.2 s while the attempt's shell lives.
while [ ! -f "$d/activated.$fleet_n" ]; do
fleet_p=; read -r fleet_p < "$d/unit.$fleet_n.pid" 2>/dev/null
[ -n "$fleet_p" ] && kill -0 "$fleet_p" 2>/dev/null || break
# Its transient unit, once, where systemd runs...
{{if .Systemd}}[ $fleet_k -ne 0 ] || systemctl stop {{q .Unit}} 2>/dev/null
{{end -}}
# ... and switch-to-configuration itself: TERM once, KILL after ten
# seconds (50 rounds).
fleet_s=; read -r fleet_s < "$d/unit.$fleet_n.stc" 2>/dev/null
[ -z "$fleet_s" ] || [ -n "$fleet_x" ] || { kill -TERM "$fleet_s" 2>/dev/null; fleet_x=1; }
[ -z "$fleet_s" ] || [ $fleet_k -ne 50 ] || kill -KILL "$fleet_s" 2>/dev/null
fleet_k=$((fleet_k+1)); sleep 0.2
done
# The log says the attempts it stopped ("stopped unit.<attempt>").
[ $fleet_k -eq 0 ] || fleet_log "$d" stopped "unit.$fleet_n"
done
