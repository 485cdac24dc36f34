package deploy

import (
	"fmt"
	"strings"
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

// q quotes s for the remote POSIX shell.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// lockScript takes the host's deploy lock, waiting up to wait seconds in
// all for it and for the activations and watchdogs of earlier deployments
// to end (GuardFile), and holds it until its standard input closes. With
// both, nothing else uses the runs' directories: it prunes them to
// keptRuns. Once it holds the lock it prints "locked", then what
// readScript prints and readEnd, in the same round trip; else
// "busy <holder>" and exits 3.
// While it waits it prints "wait <holder>" twice a second: the deployer
// learns who it waits for, and a wait whose deployer is gone ends at the
// next line, which nobody reads any more (SIGPIPE), instead of holding a
// process on the host until lock_timeout.
func lockScript(holder string, waitSeconds int) string {
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
echo %[6]s; `+waitForEOF+`; rm -f %[2]s; exit 0`, LockFile, HolderFile, waitSeconds, q(holder), readScript, readEnd, GuardFile,
		q("busy "+guardHolder), q("wait "+guardHolder), stateDir, keptRuns+1, keptRuns))
}

// keptRuns is how many of the latest runs' directories (the activation's
// output, the watchdog's decision) a host keeps: the lock removes older
// ones while no activation or watchdog runs.
const keptRuns = 10

// guardHolder names who holds GuardFile when the deploy lock is free.
const guardHolder = "an earlier deployment's activation or rollback watchdog, still running on the host after that deployment was interrupted"

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
// back. Without one within confirm seconds it decides itself to switch
// back to prev on the host, so a configuration that cuts off SSH is still
// rolled back. The decision is one symlink made once (ln -s fails when it
// exists), so the deployer and the watchdog can never both win.
func watchdogScript(run, prev string, activationSeconds, confirmSeconds int) string {
	d := stateDir + "/" + run
	return fmt.Sprintf(`d=%[1]s
`+guardScript+` || exit 1; : > "$d/guarded"
n=0; while [ ! -f "$d/activated" ] && [ $n -lt %[3]d ]; do sleep 1; n=$((n+1)); done
n=0; while [ ! -L "$d/decision" ] && [ $n -lt %[4]d ]; do sleep 1; n=$((n+1)); done
ln -s %[6]s "$d/decision" 2>/dev/null
[ "$(readlink "$d/decision")" = %[7]s ] && { echo confirmed > "$d/watchdog"; exit 0; }
echo rolling-back > "$d/watchdog"
nix-env -p %[5]s --set %[2]s && %[2]s/bin/switch-to-configuration test; echo "$?" > "$d/rolledback"`,
		q(d), q(prev), activationSeconds, confirmSeconds, ProfilePath, decisionRollback, decisionConfirm)
}

// The two decisions on an activation.
const (
	decisionConfirm  = "confirm"
	decisionRollback = "rollback"
)

// decideScript decides run's fate on the host, unless it is decided
// already, and prints the decision that stands.
func decideScript(run, decision string) string {
	link := q(stateDir + "/" + run + "/decision")
	return "if ln -s " + decision + " " + link + " 2>/dev/null; then echo " + decision + "; else readlink " + link + "; fi"
}

// profileScript points the system profile at system (a new generation).
func profileScript(system string) string {
	return "nix-env -p " + ProfilePath + " --set " + q(system) + " || { echo " + q(profileFailed) + " >&2; exit 1; }; "
}

// markScript records on the host that system was deployed with a passing
// verdict (see succeededFile).
func markScript(system string) string {
	return "{ { [ -d " + q(stateDir) + " ] || mkdir -p " + q(stateDir) + "; } && printf '%s\\n' " + q(system) + " > " + succeededFile + "; }"
}

// activationScript runs switch-to-configuration action of system and
// records its exit status for the watchdog and for a deployer that lost
// its session. Its output goes to a file on the host, not to the session,
// so a dropped session cannot end it through a broken pipe; the last lines
// are printed once it has finished.
func activationScript(run, system, action string) string {
	d := stateDir + "/" + run
	return fmt.Sprintf(`d=%[1]s; `+guardScript+` || exit 1; %[2]s/bin/switch-to-configuration %[3]s >"$d/output" 2>&1; rc=$?; echo "$rc" > "$d/activated"; tail -n 5 "$d/output" >&2; exit "$rc"`, q(d), q(system), action)
}

// Markers a remote script prints on standard error to say which of its
// steps failed.
const (
	profileFailed = "fleet: nix-env --set failed"
	prepareFailed = "fleet: the activation could not be prepared"
)
