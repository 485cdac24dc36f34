#!/bin/sh
# The deployer's words (wordLoop), a line each, "<word> <run>", until the
# standard input closes; each is answered. Only the shell's builtins:
# words come every second or more often. Each word of a run the host has
# a directory of goes into that run's log (fleet_log), with the session
# that carried it: "heard <word> lock|spare".
{{logfn}}
fleet_n=0
while read -r fleet_w fleet_r; do
# A run is hexadecimal: anything else is no word.
case $fleet_r in ''|*[!0-9a-f]*) continue ;; esac
fleet_dir={{.StateDir}}/$fleet_r
fleet_log "$fleet_dir" heard "$fleet_w" {{if .Keeps}}lock{{else}}spare{{end}}
case $fleet_w in
h|w)
# On the lock session (Keeps), a word of the current lease counts (the
# words file holds the count, which the keeper watches).
{{if .Keeps}}fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null
if [ "$fleet_t" = "$fleet_r" ]; then fleet_n=$((fleet_n+1)); echo "$fleet_n" > {{.WordsFile}}; fi
{{end -}}
# "w" is passed on to the run's watchdog, through its wake FIFO, and the
# run's "heard" file says when its watchdog last heard one (its mtime:
# for an operator, and for the host agreement's explorer).
[ "$fleet_w" != w ] || [ ! -p "$fleet_dir/wake" ] || { printf '' 2>/dev/null >"$fleet_dir/heard"; printf 'h\n' 1<>"$fleet_dir/wake"; }
echo ack ;;
c|r)
# Decide the run (confirm, roll back) unless it is decided: the decision
# is one link, made once. A run the host has no directory of is unknown.
fleet_x={{.DecisionRollback}}; [ "$fleet_w" != c ] || fleet_x={{.DecisionConfirm}}
if [ ! -d "$fleet_dir" ]; then fleet_d=unknown
elif ln -s $fleet_x "$fleet_dir/decision" 2>/dev/null; then fleet_d=$fleet_x; fleet_log "$fleet_dir" decided $fleet_x word
else fleet_d=$(readlink "$fleet_dir/decision"); fleet_log "$fleet_dir" stands "$fleet_d"; fi
# Wake the watchdog; a confirmation waits (WatchdogLetGo seconds at most)
# for it to let go of the guard.
[ ! -p "$fleet_dir/wake" ] || printf 'd\n' 1<>"$fleet_dir/wake"
[ "$fleet_d" != {{.DecisionConfirm}} ] || flock -w {{.WatchdogLetGo}} -x {{.GuardFile}} true 2>/dev/null
echo "decided $fleet_r $fleet_d" ;;
b)
# The deployer lets go: end the run's lease by signalling its keeper (named
# by the lease file), only while a keeper holds the lock: a killed
# keeper's lease file may name a pid another process has since.
fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null
[ "$fleet_t" != "$fleet_r" ] || flock -n -s {{.LockFile}} true 2>/dev/null || { kill -TERM "$fleet_p" 2>/dev/null && fleet_log "$fleet_dir" released; }
echo ack ;;
esac
done
