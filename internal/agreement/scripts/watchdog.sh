#!/bin/sh
# The run's watchdog (watchdogScript), a file of the run's directory run
# by sh: it waits for the activation to end, then for the decision on it,
# and switches back unless it is a confirmation.
d={{q .Dir}}
{{logfn}}
# It holds the guard (shared) while it lives, and runs only for an act
# that passed the fence.
exec 8>>{{.GuardFile}} && flock -s 8 || exit 1
[ "$(readlink "$d/act.1.fate")" = started ] || { echo refused > "$d/watchdog"; fleet_log "$d" watchdog refused; exit 0; }
# The wake FIFO, held open on descriptor 7: a word ("h"), the
# activation's end ("a") and a decision ("d") wake it at once; a ticker
# writes "t" every Tick seconds for its clock. "guarded" tells the act
# command that the watchdog holds the guard.
rm -f "$d/wake"; mkfifo -m 600 "$d/wake" && exec 7<>"$d/wake" || exit 1
echo waiting > "$d/watchdog"; : > "$d/guarded"; fleet_log "$d" watchdog guarded
( while sleep {{.Tick}}; do echo t || exit 0; done ) 7>&- 8>&- </dev/null >"$d/wake" 2>/dev/null &
fleet_tick=$!
trap 'kill $fleet_tick 2>/dev/null' EXIT
# Its clock: /proc/uptime, in hundredths of a second.
fleet_now() { IFS='. ' read -r fleet_s fleet_c fleet_x </proc/uptime; fleet_up=$((fleet_s * 100 + 1$fleet_c - 100)); }
# fleet_over: whether the activation is over, so that the watchdog's
# clock may run.
fleet_over() {
[ -z "$fleet_done" ] || return 0
# It has ended, or it has had activation_timeout and a few seconds
# (WaitsForActivation).
[ ! -f "$d/activated" ] || { fleet_done=1; fleet_log "$d" over activated; return 0; }
[ $((fleet_up - fleet_start)) -lt {{.WaitsForActivation}} ] || { fleet_done=1; fleet_log "$d" over timeout; return 0; }
# The run's lease has ended: no attempt starts any more (those not
# started are cancelled), and it is over once none runs.
fleet_t=; read -r fleet_t fleet_y < {{.LeaseFile}} 2>/dev/null
if [ "$fleet_t" != {{q .Run}} ] || flock -n -s {{.LockFile}} true 2>/dev/null; then
for f in "$d"/act.*.fate; do [ -L "$f" ] && ln -s cancelled "$d/unit.$(basename "$f" .fate | cut -d. -f2).fate" 2>/dev/null; done
fleet_r=
for f in "$d"/unit.*.fate; do
[ "$(readlink "$f")" = started ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2)
[ ! -f "$d/activated.$fleet_n" ] || continue
fleet_q=; read -r fleet_q < "$d/unit.$fleet_n.pid" 2>/dev/null
[ -z "$fleet_q" ] || ! kill -0 "$fleet_q" 2>/dev/null || fleet_r=1
done
[ -n "$fleet_r" ] || { fleet_done=1; fleet_log "$d" over lease-ended; return 0; }
fi
# The command that was to start the first attempt ended without starting
# it: it is cancelled, and never starts.
[ -z "$fleet_running" ] || return 1
if [ ! -L "$d/unit.1.fate" ]; then
fleet_p=; read -r fleet_p < "$d/act.1.pid" 2>/dev/null
[ -z "$fleet_p" ] || kill -0 "$fleet_p" 2>/dev/null || ln -s cancelled "$d/unit.1.fate" 2>/dev/null
[ -L "$d/unit.1.fate" ] || return 1
fi
if [ "$(readlink "$d/unit.1.fate")" = cancelled ]; then fleet_done=1; fleet_log "$d" over cancelled; else fleet_running=1; fi
[ -n "$fleet_done" ]
}
fleet_done= fleet_running=
# Wait for the decision; once the activation is over, confirm_timeout
# (Confirm, in hundredths) without an "h" decides it: switch back.
fleet_now; fleet_start=$fleet_up fleet_word=$fleet_up
until [ -L "$d/decision" ]; do
fleet_now
if fleet_over; then [ $((fleet_up - fleet_word)) -lt {{.Confirm}} ] || break; fi
read -r fleet_w <&7 || break
[ "$fleet_w" != h ] || { fleet_now; fleet_word=$fleet_up; }
done
# The decision is one link made once: the deployer's, if it was first.
# The watchdog's own (its clock ran out) says so: "lapsed".
ln -s {{.DecisionRollback}} "$d/decision" 2>/dev/null && : > "$d/lapsed" && fleet_log "$d" decided {{.DecisionRollback}} lapsed
# Decided, no attempt starts any more (their fates cancelled). Did one
# begin (fleet_began), or did every one that started meet a held switch
# lock (fleet_locked: nothing changed)?
fleet_began= fleet_locked=
for f in "$d"/act.*.fate; do
[ -L "$f" ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2); fleet_u="$d/unit.$fleet_n.fate"
ln -s cancelled "$fleet_u" 2>/dev/null
fleet_a=; read -r fleet_a < "$d/activated.$fleet_n" 2>/dev/null
if [ "$(readlink "$fleet_u")" = started ]; then if [ "$fleet_a" = {{.SwitchLockedExit}} ]; then fleet_locked=1; else fleet_began=1; fi; fi
done
[ "$(readlink "$d/decision")" = {{.DecisionConfirm}} ] && { echo confirmed > "$d/watchdog"; fleet_log "$d" watchdog confirmed; exit 0; }
echo rolling-back > "$d/watchdog"; fleet_log "$d" watchdog rolling-back "began=$fleet_began" "locked=$fleet_locked"
# Stop the attempts still running (stop_attempts.sh).
{{.StopAttempts}}
# Switch back a host that runs the run's system, or still runs the one
# before when an attempt began (cut short, it may have done part of its
# work); a host whose every attempt met the lock gets its profile pointed
# back, and no switch; a host that runs anything else was switched by
# someone else since, and is left alone (its profile pointed back if it
# was left on the run's system).
fleet_cur=$(readlink -f /run/current-system)
if [ "$fleet_cur" = {{q .System}} ] || { [ "$fleet_cur" = {{q .Previous}} ] && [ -n "$fleet_began" ]; }; then
fleet_log "$d" switching-back "$fleet_cur"
nix-env -p {{.ProfilePath}} --set {{q .Previous}} && {{q .Previous}}/bin/switch-to-configuration test; fleet_rc=$?; echo "$fleet_rc" > "$d/rolledback"; fleet_log "$d" switched-back "$fleet_rc"
elif [ "$fleet_cur" = {{q .Previous}} ] && [ -n "$fleet_locked" ]; then
nix-env -p {{.ProfilePath}} --set {{q .Previous}}; fleet_rc=$?; echo "$fleet_rc" > "$d/rolledback"; fleet_log "$d" profile-back "$fleet_rc"
else
[ "$(readlink -f {{.ProfilePath}})" != {{q .System}} ] || { nix-env -p {{.ProfilePath}} --set {{q .Previous}}; fleet_log "$d" profile-back "$?"; }
echo "kept $fleet_cur" > "$d/rolledback"; fleet_log "$d" kept "$fleet_cur"
fi
echo done > "$d/watchdog"
