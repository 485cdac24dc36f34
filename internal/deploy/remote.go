package deploy

import (
	"fmt"
	"strconv"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// pathFallback lets a remote command find nix-env, systemd-run and friends
// on a target whose login shell lacks the deployer's PATH.
const pathFallback = `PATH="$PATH:/run/current-system/sw/bin:/nix/var/nix/profiles/system/sw/bin:/run/wrappers/bin"; export PATH; `

// ProfilePath is the system profile switched to each new system.
const ProfilePath = "/nix/var/nix/profiles/system"

// LockFile and HolderFile are the host's deploy lock: flock(1) on the
// file, held by a session that lives as long as the node's deploy; the
// holder file names who holds it. Another deployment of the host (another
// state, another runner) takes the same lock.
//
// GuardFile outlives the session: an activation and its watchdog each hold
// a shared flock on it while they run, and taking the deploy lock waits
// for an exclusive one. A deployment interrupted mid-activation lets its
// session go at once, but the activation and the watchdog that confirms or
// rolls it back run on; the next deployment of the host waits for them
// instead of switching the host while they still can.
const (
	LockFile   = "/run/fleet-deploy.lock"
	HolderFile = "/run/fleet-deploy.holder"
	GuardFile  = "/run/fleet-deploy.guard"
	stateDir   = "/run/fleet-deploy"
)

func remote(script string) string { return pathFallback + script }

// lockScript takes the host's deploy lock, waiting up to wait seconds in
// all for it and for the activations and watchdogs of earlier deployments
// to end (GuardFile), and holds it while the deployer keeps speaking. With
// both, nothing else uses the runs' directories: it prunes them to
// keptRuns. Once it holds the lock it prints "locked", then what
// readScript prints and readEnd, in the same round trip; else
// "busy <holder>" and exits 3.
// While it waits it prints "wait <holder>" twice a second: the deployer
// learns who it waits for, and a wait whose deployer is gone ends at the
// next line, which nobody reads any more (SIGPIPE), instead of holding a
// process on the host until lock_timeout.
//
// Held, it reads the deployer's words (wordLoop) until its standard input
// closes. The lock is a lease: a deployer that has said nothing for lease
// seconds (it vanished, its machine or the network between died, and TCP
// has not noticed) loses it, so that it blocks no other deployment for
// longer; its watchdog still decides its activation.
func lockScript(holder string, waitSeconds, leaseSeconds int) string {
	return remote(fmt.Sprintf(`exec 9>>%[1]s 8>>%[7]s || exit 2
end=
until flock -n 9; do
[ -n "$end" ] || end=$(($(date +%%s) + %[3]d))
[ "$(date +%%s)" -lt "$end" ] || { echo "busy $(cat %[2]s 2>/dev/null)"; exit 3; }
echo "wait $(cat %[2]s 2>/dev/null)"; sleep 0.5
done
until flock -n 8; do
[ -n "$end" ] || end=$(($(date +%%s) + %[3]d))
[ "$(date +%%s)" -lt "$end" ] || { echo %[8]s; exit 3; }
echo %[9]s; sleep 0.5
done
set -- %[10]s/*/
[ $# -le %[12]d ] || ls -1dt %[10]s/*/ 2>/dev/null | tail -n +%[11]d | while read -r old; do rm -rf "$old"; done
exec 8>&-
printf '%%s\n' %[4]s > %[2]s; echo locked
%[5]s
echo %[6]s
trap 'rm -f %[2]s %[13]s; exit 1' TERM
fleet_n=0; echo 0 > %[13]s; fleet_me=$$
( fleet_p=; fleet_m=0
while sleep %[14]s; do
fleet_c=; read -r fleet_c < %[13]s
if [ "$fleet_c" != "$fleet_p" ]; then fleet_p=$fleet_c fleet_m=0; else fleet_m=$((fleet_m+1)); [ $fleet_m -lt 4 ] || { kill -TERM $fleet_me; exit 0; }; fi
done ) 9>&- </dev/null >/dev/null 2>&1 &
fleet_lease=$!
%[15]s
kill $fleet_lease 2>/dev/null; rm -f %[2]s %[13]s; exit 0`, LockFile, HolderFile, waitSeconds, shell.Quote(holder), readScript, readEnd, GuardFile,
		shell.Quote("busy "+guardHolder), shell.Quote("wait "+guardHolder), stateDir, keptRuns+1, keptRuns,
		leaseFile, strconv.FormatFloat(float64(max(leaseSeconds, 1))/4, 'f', -1, 64), wordLoop(`fleet_n=$((fleet_n+1)); echo "$fleet_n" > `+leaseFile)))
}

// leaseFile counts the words the deploy lock's holder said, for the lease.
const leaseFile = "/run/fleet-deploy.lease"

// wordLoop reads the deployer's words, a line each ("h", or "h <run>"
// while it judges run's activation), until its standard input closes; each
// does first what onWord says, passes the word on to run's watchdog (its
// wake FIFO), and is acknowledged ("ack"): a word is how the deployer says
// it is still there, and an acknowledgement how the host does. Only the
// shell's builtins: a word comes every second or more often.
func wordLoop(onWord string) string {
	return fmt.Sprintf(`while read -r fleet_w fleet_r; do
%s
case $fleet_r in ''|*[!0-9a-f]*) ;; *) [ ! -p %s/"$fleet_r"/wake ] || printf 'h\n' 1<>%s/"$fleet_r"/wake ;; esac
echo ack
done`, orStr(onWord, ":"), stateDir, stateDir)
}

// wordScript is a session that only passes the deployer's words on, when
// the lock session that did has ended (the connection it rode dropped).
func wordScript() string { return remote(wordLoop("")) }

// keptRuns is how many of the latest runs' directories (the activation's
// output, the watchdog's decision) a host keeps: the lock removes older
// ones while no activation or watchdog runs.
const keptRuns = 10

// guardHolder names who holds GuardFile when the deploy lock is free: a
// deploy that ended lets go of the guard before it ends, so what holds it
// is an activation, or a watchdog waiting for a word or switching back,
// of a deploy that stopped before it could: interrupted, or gone.
const guardHolder = "an earlier deployment's activation or its rollback watchdog, still running on the host"

// guardScript takes a shared hold of GuardFile for the rest of the
// script's life (descriptor 8).
const guardScript = "exec 8>>" + GuardFile + " && flock -s 8"

// readEnd ends readScript's lines in the lock session's output.
const readEnd = "--read--"

// readScript prints the current system, whether the host is a container
// and whether systemd runs, a line each.
const readScript = `readlink -f /run/current-system || echo
if systemd-detect-virt --container >/dev/null 2>&1; then echo container; else echo bare; fi
if [ -d /run/systemd/system ]; then echo systemd; else echo nosystemd; fi
` + readSucceeded

// readSucceeded prints the line of succeededFile, or an empty line, with
// the shell's builtins only: the scripts that read a host run on every
// node of every plan, and each process they start costs.
const readSucceeded = `fleet_ok=; read -r fleet_ok 2>/dev/null <` + succeededFile + `; printf '%s\n' "$fleet_ok"`

// waitForEOF waits, with the shell's builtins only, for the standard input
// to close: the deployer ends a session that way.
const waitForEOF = `while read -r _; do :; done`

// succeededFile names the last system a deploy finished on the host with a
// passing verdict: a host that runs a system kept after a failing verdict
// (on_failure = keep) does not count as done.
const succeededFile = stateDir + "/succeeded"

// readCurrentScript prints the current system (refresh, drift), then the
// last system a deploy finished there with a passing verdict.
const readCurrentScript = `readlink -f /run/current-system || echo
` + readSucceeded

// watchdogScript waits for the activation of run to end, then for the
// decision on it: the deployer's confirmation, or its request to switch
// back. Its clock runs while the deployer says nothing: once the
// activation has ended (or activationSeconds have passed) and confirm
// seconds have passed since the deployer's last word ("h" on the wake
// FIFO, passed on by a wordLoop), it decides itself to switch back to prev
// on the host, so a configuration that cuts off SSH, or a deployer that
// vanished, is still rolled back, and a verdict that takes its time is
// not. The decision is one symlink made once (ln -s fails when it
// exists), so the deployer and the watchdog can never both win. The FIFO
// wakes it at once for a word, the activation's end ("a") and a decision
// ("d"); a tick each second for its clock, read from /proc/uptime in
// hundredths (no process started to read the time). It holds no "${":
// systemd substitutes that from the unit's environment before it runs.
func watchdogScript(run, prev string, activationSeconds, confirmSeconds int) string {
	d := stateDir + "/" + run
	return fmt.Sprintf(`d=%[1]s
`+guardScript+` || exit 1
rm -f "$d/wake"; mkfifo -m 600 "$d/wake" && exec 7<>"$d/wake" || exit 1
: > "$d/guarded"
( while sleep 1; do echo t || exit 0; done ) 7>&- 8>&- </dev/null >"$d/wake" 2>/dev/null &
fleet_tick=$!
trap 'kill $fleet_tick 2>/dev/null' EXIT
fleet_now() { IFS='. ' read -r fleet_s fleet_c fleet_x </proc/uptime; fleet_up=$((fleet_s * 100 + 1$fleet_c - 100)); }
fleet_now; fleet_start=$fleet_up fleet_word=$fleet_up
until [ -L "$d/decision" ]; do
fleet_now
if [ -f "$d/activated" ] || [ $((fleet_up - fleet_start)) -ge %[3]d00 ]; then [ $((fleet_up - fleet_word)) -lt %[4]d00 ] || break; fi
read -r fleet_w <&7 || break
[ "$fleet_w" != h ] || { fleet_now; fleet_word=$fleet_up; }
done
ln -s %[6]s "$d/decision" 2>/dev/null
[ "$(readlink "$d/decision")" = %[7]s ] && { echo confirmed > "$d/watchdog"; exit 0; }
echo rolling-back > "$d/watchdog"
nix-env -p %[5]s --set %[2]s && %[2]s/bin/switch-to-configuration test; echo "$?" > "$d/rolledback"`,
		shell.Quote(d), shell.Quote(prev), activationSeconds, confirmSeconds, ProfilePath, decisionRollback, decisionConfirm)
}

// The two decisions on an activation.
const (
	decisionConfirm  = "confirm"
	decisionRollback = "rollback"
)

// decideScript decides run's fate on the host, unless it is decided
// already, wakes run's watchdog, and prints the decision that stands,
// which it keeps in $fleet_d for what follows.
func decideScript(run, decision string) string {
	dir := shell.Quote(stateDir + "/" + run)
	return "if ln -s " + decision + " " + dir + "/decision 2>/dev/null; then fleet_d=" + decision + "; else fleet_d=$(readlink " + dir + "/decision); fi; " +
		"[ ! -p " + dir + "/wake ] || printf 'd\\n' 1<>" + dir + "/wake; echo \"$fleet_d\""
}

// releasedScript waits up to seconds for what holds GuardFile (the
// activation and the watchdog of this deploy) to let go of it, and prints
// "released" when it has: a node is done once its host has let go of
// everything its deploy took.
func releasedScript(seconds int) string {
	return fmt.Sprintf("{ exec 8>>%s && flock -w %d 8 && echo released; exec 8>&-; }", GuardFile, seconds)
}

// profileScript points the system profile at system (a new generation).
func profileScript(system string) string {
	return "nix-env -p " + ProfilePath + " --set " + shell.Quote(system) + " || { echo " + shell.Quote(profileFailed) + " >&2; exit 1; }; "
}

// markScript records on the host that system was deployed with a passing
// verdict (see succeededFile).
func markScript(system string) string {
	return "{ { [ -d " + shell.Quote(stateDir) + " ] || mkdir -p " + shell.Quote(stateDir) + "; } && printf '%s\\n' " + shell.Quote(system) + " > " + succeededFile + "; }"
}

// activationScript runs switch-to-configuration action of system and
// records its exit status for the watchdog and for a deployer that lost
// its session. Its output goes to a file on the host, not to the session,
// so a dropped session cannot end it through a broken pipe; the last lines
// are printed once it has finished.
func activationScript(run, system, action string) string {
	d := stateDir + "/" + run
	return fmt.Sprintf(`d=%[1]s; `+guardScript+` || exit 1; %[2]s/bin/switch-to-configuration %[3]s >"$d/output" 2>&1; rc=$?; echo "$rc" > "$d/activated"; [ ! -p "$d/wake" ] || printf 'a\n' 1<>"$d/wake"; tail -n 5 "$d/output" >&2; exit "$rc"`, shell.Quote(d), shell.Quote(system), action)
}

// Markers a remote script prints on standard error to say which of its
// steps failed.
const (
	profileFailed = "fleet: nix-env --set failed"
	prepareFailed = "fleet: the activation could not be prepared"
)
