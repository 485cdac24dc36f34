#!/bin/sh
# The lock session (takeScript): take the host's deploy lock for a run,
# then keep its lease until the deployer lets go or goes silent.
#
# Descriptor 9 holds the deploy lock for the whole session; descriptor 8
# is the guard, held only while the lease is set up.
exec 9>>{{.LockFile}} 8>>{{.GuardFile}} || exit 2
{{logfn}}

# Wait for the lock: at most WaitSeconds in all (for the lock, then the
# guard), saying who holds it twice a second. A wait whose deployer is
# gone ends at the next line, which nobody reads (SIGPIPE).
end=
until flock -n 9; do
[ -n "$end" ] || end=$(($(date +%s) + {{.WaitSeconds}}))
[ "$(date +%s)" -lt "$end" ] || { echo "busy $(cat {{.HolderFile}} 2>/dev/null)"; exit 3; }
echo "wait $(cat {{.HolderFile}} 2>/dev/null)"; sleep 0.5
done

# The lock is held: from now on whatever ends the script (a closed input,
# a signal, a broken pipe) stops the keeper and removes the lease's files,
# if the lease is still this run's; a second signal while it does (the
# keeper's, the session's end) does not stop it.
fleet_end() { trap - EXIT; trap '' HUP PIPE TERM INT; [ -z "$fleet_keeper" ] || kill $fleet_keeper 2>/dev/null; fleet_t=; read -r fleet_t fleet_p < {{.LeaseFile}} 2>/dev/null; [ "$fleet_t" != {{q .Run}} ] || { rm -f {{.LeaseFile}} {{.WordsFile}} {{.HolderFile}}; fleet_log {{.StateDir}}/{{q .Run}} lease-ended; }; }
fleet_keeper=
trap 'fleet_end; exit 1' HUP PIPE TERM INT
trap fleet_end EXIT

# What is left of an earlier lease (a keeper killed before it could).
rm -f {{.LeaseFile}} {{.WordsFile}}

# Take the guard: wait for the actors of earlier runs (their activation,
# their watchdog) to end, in the same time as for the lock.
until flock -n 8; do
[ -n "$end" ] || end=$(($(date +%s) + {{.WaitSeconds}}))
[ "$(date +%s)" -lt "$end" ] || { echo {{q (print "busy " .GuardHolder)}}; exit 3; }
echo {{q (print "wait " .GuardHolder)}}; sleep 0.5
done

# No actor runs: keep the latest KeptRuns runs' directories only.
set -- {{.StateDir}}/*/
[ $# -le {{.KeptRuns}} ] || ls -1dt {{.StateDir}}/*/ 2>/dev/null | tail -n +{{.FirstPruned}} | while read -r old; do rm -rf "$old"; done

# The lease: the run and the pid of this shell (which "b <run>" signals),
# written whole (a rename); then the guard is let go. The run's log says
# when its lease began ("leased"), went silent ("lease-silent": the
# keeper ends it) and ended ("lease-ended").
mkdir -p {{.StateDir}}/{{q .Run}} && printf '%s %s\n' {{q .Run}} $$ > {{.LeaseFile}}.new && mv -f {{.LeaseFile}}.new {{.LeaseFile}} || exit 2
exec 8>&-
printf '%s\n' {{q .Holder}} > {{.HolderFile}}; fleet_log {{.StateDir}}/{{q .Run}} leased; echo locked

# What the deployer reads of the host (readScript), and its end.
{{.Read}}
echo {{.ReadEnd}}

# The keeper: every LeaseCheck seconds it looks at the words file (the
# count of the lease's words, see words.sh); after LeaseMisses looks
# without a new word the lease is silent, and it ends the session (TERM:
# fleet_end removes the lease's files).
echo start > {{.WordsFile}}; fleet_me=$$
( fleet_p=; fleet_m=0
while sleep {{.LeaseCheck}}; do
fleet_c=; read -r fleet_c < {{.WordsFile}}
if [ "$fleet_c" != "$fleet_p" ]; then fleet_p=$fleet_c fleet_m=0; else fleet_m=$((fleet_m+1)); [ $fleet_m -lt {{.LeaseMisses}} ] || { fleet_log {{.StateDir}}/{{q .Run}} lease-silent; kill -TERM $fleet_me; exit 0; }; fi
done ) 9>&- </dev/null >/dev/null 2>&1 &
fleet_keeper=$!

# Keep the lease: read the deployer's words until the input closes
# (words.sh, keeping).
{{.Words}}
