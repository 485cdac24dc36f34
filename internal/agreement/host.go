package agreement

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// The host's half: the scripts it runs, and where it keeps its state (see
// the package documentation).

// The host's files.
const (
	LockFile      = "/run/fleet-deploy.lock"
	HolderFile    = "/run/fleet-deploy.holder"
	GuardFile     = "/run/fleet-deploy.guard"
	LeaseFile     = "/run/fleet-deploy.lease"
	WordsFile     = "/run/fleet-deploy.words"
	StateDir      = "/run/fleet-deploy"
	SucceededFile = StateDir + "/succeeded"
	// ProfilePath is the system profile switched to each new system.
	ProfilePath = "/nix/var/nix/profiles/system"
)

// pathFallback lets a remote command find nix-env, systemd-run and friends
// on a host whose login shell lacks the deployer's PATH.
const pathFallback = `PATH="$PATH:/run/current-system/sw/bin:/nix/var/nix/profiles/system/sw/bin:/run/wrappers/bin"; export PATH; `

// Remote is script as a host runs it: with the PATH fallback.
func Remote(script string) string { return pathFallback + script }

// FencedExit is the exit status of an action the host refused (see
// Fenced); its standard error says why, after FencedMarker.
const FencedExit = 75

// SwitchLockedExit is switch-to-configuration's exit status when another
// switch holds its lock: it changed nothing, and the deployer tries again.
const SwitchLockedExit = 11

// FencedMarker starts the host's word that it refused an action.
const FencedMarker = "fleet: fenced: "

// The decisions on an activation.
const (
	DecisionConfirm  = "confirm"
	DecisionRollback = "rollback"
)

// keptRuns is how many of the latest runs' directories a host keeps: a
// take removes older ones while no actor runs.
const keptRuns = 10

// guardHolder names who holds GuardFile when the lock is free: an actor of
// a run that ended before its actors did (interrupted, or gone): its
// activation, or its watchdog waiting for a word or switching back.
const guardHolder = "an earlier deployment's activation or its rollback watchdog, still running on the host"

// GuardHolder says whether a holder a take reported (Busy.Holder) is an
// earlier run's actor rather than a deployment.
func GuardHolder(holder string) bool { return strings.HasPrefix(holder, guardHolder) }

// readEnd ends what readScript prints in the lock session's output.
const readEnd = "--read--"

// readScript prints the current system, whether the host is a container,
// whether systemd runs and the last system a run finished with a passing
// verdict, a line each.
const readScript = `readlink -f /run/current-system || echo
if systemd-detect-virt --container >/dev/null 2>&1; then echo container; else echo bare; fi
if [ -d /run/systemd/system ]; then echo systemd; else echo nosystemd; fi
` + readSucceeded

// readSucceeded prints SucceededFile's line, or an empty line, with the
// shell's builtins only: the scripts that read a host run on every node of
// every plan, and each process they start costs.
const readSucceeded = `fleet_ok=; read -r fleet_ok 2>/dev/null <` + SucceededFile + `; printf '%s\n' "$fleet_ok"`

// ReadCurrentScript prints the current system (a refresh, drift), then
// the last system a run finished there with a passing verdict.
const ReadCurrentScript = `readlink -f /run/current-system || echo
` + readSucceeded

// MarkScript records on the host that system was deployed with a passing
// verdict (SucceededFile).
func MarkScript(system string) string {
	return "{ { [ -d " + shell.Quote(StateDir) + " ] || mkdir -p " + shell.Quote(StateDir) + "; } && printf '%s\\n' " + shell.Quote(system) + " > " + SucceededFile + "; }"
}

// takeScript takes the host's deploy lock for run: it waits up to wait
// seconds in all for the lock and then for the guard (the actors of
// earlier runs), printing "wait <holder>" twice a second (a wait whose
// deployer is gone ends at the next line, which nobody reads: SIGPIPE),
// and "busy <holder>" when out of time. Holding the lock, it removes what
// is left of an earlier lease (a keeper killed before it could), takes
// the guard, prunes the runs' directories, writes run's lease, lets the
// guard go and prints "locked", then what readScript prints and readEnd;
// from the moment it holds the lock, whatever ends it (a closed input, a
// signal, a broken pipe) removes the lease's files, and a second signal
// while it does (its keeper's, the session's end) does not stop it.
// Then it keeps the lease: it reads words (wordLoop) until its standard
// input closes, or until its keeper, which looks at WordsFile every
// leaseCheck, has seen no word of the lease for leaseMisses looks; either
// way the lease ends and its files go.
func takeScript(run, holder string, waitSeconds int, t Timing) string {
	r := shell.Quote(run)
	return Remote(fmt.Sprintf(`exec 9>>%[1]s 8>>%[2]s || exit 2
end=
until flock -n 9; do
[ -n "$end" ] || end=$(($(date +%%s) + %[3]d))
[ "$(date +%%s)" -lt "$end" ] || { echo "busy $(cat %[4]s 2>/dev/null)"; exit 3; }
echo "wait $(cat %[4]s 2>/dev/null)"; sleep 0.5
done
fleet_end() { trap - EXIT; trap '' HUP PIPE TERM INT; [ -z "$fleet_keeper" ] || kill $fleet_keeper 2>/dev/null; fleet_t=; read -r fleet_t fleet_p < %[5]s 2>/dev/null; [ "$fleet_t" != %[12]s ] || rm -f %[5]s %[6]s %[4]s; }
fleet_keeper=
trap 'fleet_end; exit 1' HUP PIPE TERM INT
trap fleet_end EXIT
rm -f %[5]s %[6]s
until flock -n 8; do
[ -n "$end" ] || end=$(($(date +%%s) + %[3]d))
[ "$(date +%%s)" -lt "$end" ] || { echo %[7]s; exit 3; }
echo %[8]s; sleep 0.5
done
set -- %[9]s/*/
[ $# -le %[10]d ] || ls -1dt %[9]s/*/ 2>/dev/null | tail -n +%[11]d | while read -r old; do rm -rf "$old"; done
mkdir -p %[9]s/%[12]s && printf '%%s %%s\n' %[12]s $$ > %[5]s.new && mv -f %[5]s.new %[5]s || exit 2
exec 8>&-
printf '%%s\n' %[13]s > %[4]s; echo locked
%[14]s
echo %[15]s
echo start > %[6]s; fleet_me=$$
( fleet_p=; fleet_m=0
while sleep %[16]s; do
fleet_c=; read -r fleet_c < %[6]s
if [ "$fleet_c" != "$fleet_p" ]; then fleet_p=$fleet_c fleet_m=0; else fleet_m=$((fleet_m+1)); [ $fleet_m -lt %[17]d ] || { kill -TERM $fleet_me; exit 0; }; fi
done ) 9>&- </dev/null >/dev/null 2>&1 &
fleet_keeper=$!
%[18]s`, LockFile, GuardFile, waitSeconds, HolderFile, LeaseFile, WordsFile,
		shell.Quote("busy "+guardHolder), shell.Quote("wait "+guardHolder), StateDir, keptRuns, keptRuns+1,
		r, shell.Quote(holder), readScript, readEnd, strconv.FormatFloat(t.leaseCheck().Seconds(), 'f', -1, 64), leaseMisses, wordLoop(true)))
}

// wordLoop reads the deployer's words, a line each, until its standard
// input closes: on the lock session (keeps), "h <run>" and "w <run>" count
// as a word of run's lease when it is current (WordsFile: the count), so
// that the lease is the lock session's, ending with its connection on both
// sides alike; on any session, "w" is passed on to run's watchdog (its
// wake FIFO); each is acknowledged ("ack"). "c <run>"
// and "r <run>" decide run (confirm, roll back) unless it is decided, wake
// its watchdog (a confirmation waits for it to let go of the guard), and
// answer "decided <run> <the decision that stands>"
// ("unknown" for a run the host has no directory of). "b <run>" ends run's
// lease, as its deployer lets go: its keeper, named by the lease file,
// is signalled only while a keeper holds the lock (a killed keeper's lease
// file may name a pid another process has since). Only the shell's
// builtins for words: they come every second or more often.
func wordLoop(keeps bool) string {
	lease := ""
	if keeps {
		lease = `fleet_t=; read -r fleet_t fleet_p < ` + LeaseFile + ` 2>/dev/null
if [ "$fleet_t" = "$fleet_r" ]; then fleet_n=$((fleet_n+1)); echo "$fleet_n" > ` + WordsFile + `; fi
`
	}
	return `fleet_n=0
while read -r fleet_w fleet_r; do
case $fleet_r in ''|*[!0-9a-f]*) continue ;; esac
fleet_dir=` + StateDir + `/$fleet_r
case $fleet_w in
h|w)
` + lease + `[ "$fleet_w" != w ] || [ ! -p "$fleet_dir/wake" ] || printf 'h\n' 1<>"$fleet_dir/wake"
echo ack ;;
c|r)
fleet_x=` + DecisionRollback + `; [ "$fleet_w" != c ] || fleet_x=` + DecisionConfirm + `
if [ ! -d "$fleet_dir" ]; then fleet_d=unknown
elif ln -s $fleet_x "$fleet_dir/decision" 2>/dev/null; then fleet_d=$fleet_x
else fleet_d=$(readlink "$fleet_dir/decision"); fi
[ ! -p "$fleet_dir/wake" ] || printf 'd\n' 1<>"$fleet_dir/wake"
[ "$fleet_d" != ` + DecisionConfirm + ` ] || flock -w ` + watchdogLetGoText + ` -x ` + GuardFile + ` true 2>/dev/null
echo "decided $fleet_r $fleet_d" ;;
b)
fleet_t=; read -r fleet_t fleet_p < ` + LeaseFile + ` 2>/dev/null
[ "$fleet_t" != "$fleet_r" ] || flock -n -s ` + LockFile + ` true 2>/dev/null || kill -TERM "$fleet_p" 2>/dev/null
echo ack ;;
esac
done`
}

// watchdogLetGoText bounds, in seconds, how long a confirmation waits for
// the confirmed watchdog (woken by the decision, it ends at once) to let go
// of the guard, so that a deploy of the host right after this one finds
// nothing of this one's running.
const watchdogLetGoText = "10"

// spareScript is a spare session: it only reads words (a new login
// carries them when the lock session's connection went quiet): they keep
// the run's watchdog waiting, not the lease.
func spareScript() string { return Remote(wordLoop(false)) }

// fenceScript defines fleet_fence RUN ACTION, which a fenced action runs
// first: it takes the guard shared (descriptor 8, held for the rest of
// the script's life, so no lease begins while it acts), then checks that
// a deployer holds the lock, that the lease is RUN's, and claims ACTION's
// fate ("started", made once: an action the deployer cancelled, or one
// that ran already, is refused). A refusal prints FencedMarker and why,
// and exits FencedExit.
const fenceScript = `fleet_fence() {
mkdir -p ` + StateDir + `/"$1" && exec 8>>` + GuardFile + ` && flock -s 8 || { echo "` + FencedMarker + `the guard could not be taken" >&2; exit ` + fencedExitText + `; }
if flock -n -s ` + LockFile + ` true 2>/dev/null; then echo "` + FencedMarker + `no deployment holds the host's deploy lock: this deployer's lease on it had ended" >&2; exit ` + fencedExitText + `; fi
fleet_t=; read -r fleet_t fleet_p < ` + LeaseFile + ` 2>/dev/null
[ "$fleet_t" = "$1" ] || { echo "` + FencedMarker + `another deployment's lease holds the host's deploy lock: this deployer's had ended" >&2; exit ` + fencedExitText + `; }
ln -s started ` + StateDir + `/"$1/$2.fate" 2>/dev/null || { echo "` + FencedMarker + `the $2 of this run was cancelled by its deployer, or ran already" >&2; exit ` + fencedExitText + `; }
}
`

const fencedExitText = "75"

// Markers a remote script prints on standard error to say which of its
// steps failed.
const (
	ProfileFailed = "fleet: nix-env --set failed"
	PrepareFailed = "fleet: the activation could not be prepared"
)

// profileScript points the system profile at system (a new generation).
func profileScript(system string) string {
	return "nix-env -p " + ProfilePath + " --set " + shell.Quote(system) + " || { echo " + shell.Quote(ProfileFailed) + " >&2; exit 1; }; "
}

// ProfileScript is run's profile action (goal boot): fenced, it points the
// system profile at system.
func ProfileScript(run, system string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " profile\n" + profileScript(system))
}

// Activation is one attempt at run's activation: the act action.
type Activation struct {
	Run, System, Previous string
	Attempt               int  // 1, then each retry of a held switch lock
	SetProfile            bool // point the system profile at System first (not for goal test)
	Watch                 bool // start the watchdog that switches back to Previous unless confirmed
	Systemd, Container    bool
	Timing                Timing
}

// Script is the act command: fenced (act.<attempt>), then on the first
// attempt the profile and the watchdog (which must hold the guard before
// the activation may start), then the activation, through systemd-run
// where systemd runs (RuntimeMaxSec=180 in a container) so that it
// outlives the session.
func (a Activation) Script() string {
	var b strings.Builder
	b.WriteString(fenceScript)
	fmt.Fprintf(&b, "fleet_fence %s act.%d\necho $$ > %s/act.%d.pid\n", shell.Quote(a.Run), a.Attempt, shell.Quote(StateDir+"/"+a.Run), a.Attempt)
	if a.Attempt == 1 {
		if a.SetProfile {
			b.WriteString(profileScript(a.System) + "\n")
		}
		if a.Watch {
			b.WriteString("(\n" + a.startWatchdog() + "\n) || { echo " + shell.Quote(PrepareFailed) + " >&2; exit 1; }\n")
		}
	}
	cmd := "sh -c " + shell.Quote(a.unitScript())
	if a.Systemd {
		props := ""
		if a.Container {
			props = " -p RuntimeMaxSec=180"
		}
		cmd = "systemd-run --collect --pipe --quiet --no-ask-password --service-type=exec --unit=" + shell.Quote(ActivationUnit(a.Run)) + props + " " + cmd
	}
	b.WriteString(cmd)
	return Remote(b.String())
}

// ActivationUnit and WatchdogUnit name a run's transient units on a host.
func ActivationUnit(run string) string { return "fleet-activate-" + run }

// WatchdogUnit names run's watchdog's transient unit.
func WatchdogUnit(run string) string { return "fleet-watchdog-" + run }

// unitScript is the activation itself: under the guard and the run's
// lease (the lease file names the run, and a keeper holds the lock: the
// fence act passed), claiming its fate (unit.<attempt>: a deployer that gave up on it
// before it started cancels it, and a watchdog that decided does), unless
// the run is decided already, switch-to-configuration test, its output to
// a file on the host (so a dropped session cannot end it through a broken
// pipe). Its pid (unit.<attempt>.pid, written before the fate is claimed,
// so a started attempt always names one) and switch-to-configuration's
// (unit.<attempt>.stc) tell a watchdog that switches back what to stop
// first. Its exit status is recorded for the attempt (activated.<attempt>,
// for a deployer that lost the session) and, unless the switch lock was
// held (exit 11: the deployer tries again), as the activation's
// (activated): the watchdog's "the activation has ended"; a record that
// cannot be written fails the attempt (exit 1, RecordFailed in its
// output). Its last lines are printed once it has finished. One line: systemd-run writes it into
// the transient unit's file, where a line of its own would be read as the
// file's (a line that starts with "[" as a section header, and the unit
// fails to load).
func (a Activation) unitScript() string {
	return strings.ReplaceAll(fmt.Sprintf(`d=%[1]s; exec 8>>%[2]s && flock -s 8 || exit 1
fleet_t=; read -r fleet_t fleet_p < %[3]s 2>/dev/null
echo $$ > "$d/unit.%[8]d.pid"
if [ "$fleet_t" != %[4]s ]; then echo "%[5]sthis deployer's lease on the host's deploy lock ended before the activation started" > "$d/output"; rc=%[6]s
elif flock -n -s %[10]s true 2>/dev/null; then echo "%[5]sno deployment holds the host's deploy lock: this deployer's lease on it ended before the activation started" > "$d/output"; rc=%[6]s
elif ! ln -s started "$d/unit.%[8]d.fate" 2>/dev/null; then echo "%[5]sthe activation was cancelled before it started" > "$d/output"; rc=%[6]s
elif [ -L "$d/decision" ]; then echo "%[5]sthe activation was decided on before it started" > "$d/output"; rc=%[6]s
else %[7]s/bin/switch-to-configuration test >"$d/output" 2>&1 & echo $! > "$d/unit.%[8]d.stc"; wait $!; rc=$?; fi
{ echo "$rc" > "$d/activated.%[8]d" && { [ "$rc" = %[9]d ] || echo "$rc" > "$d/activated"; }; } || { echo %[11]s >> "$d/output"; echo 1 > "$d/activated"; rc=1; }
[ ! -p "$d/wake" ] || printf 'a\n' 1<>"$d/wake"; tail -n 5 "$d/output" >&2; exit "$rc"`,
		shell.Quote(StateDir+"/"+a.Run), GuardFile, LeaseFile, shell.Quote(a.Run), FencedMarker, fencedExitText, shell.Quote(a.System), a.Attempt, SwitchLockedExit, LockFile, shell.Quote(RecordFailed)), "\n", "; ")
}

// startWatchdog runs the watchdog in the background, as a transient unit
// where systemd runs, so that it survives the session, and waits up to
// ten seconds for it to hold the guard (it touches "guarded" then). Its
// script is a file of the run's directory (watchdog.sh), run by sh: given
// to systemd-run on its command line, its lines would be written into the
// transient unit's file and read as the file's.
func (a Activation) startWatchdog() string {
	dir := shell.Quote(StateDir + "/" + a.Run)
	file := shell.Quote(StateDir + "/" + a.Run + "/watchdog.sh")
	write := "printf '%s\\n' " + shell.Quote(pathFallback+a.watchdogScript()) + " > " + file + " || exit 1\n"
	start := ""
	if a.Systemd {
		start = "systemd-run --collect --quiet --no-ask-password --unit=" + shell.Quote(WatchdogUnit(a.Run)) + " sh " + file + " || exit 1"
	} else {
		// Only the background command itself, with every stream
		// redirected: a backgrounded list would keep the session's
		// output open.
		start = "nohup sh " + file + " </dev/null >/dev/null 2>&1 &"
	}
	return write + start + "\nn=0; while [ ! -e " + dir + "/guarded ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done; [ -e " + dir + "/guarded ]"
}

// watchdogScript waits for the activation to end, then for the decision
// on it: the deployer's confirmation, or its request to switch back. Its
// clock runs while the deployer says nothing: once the activation has
// ended (or activation_timeout and a few seconds have passed, or the
// command that was to start it ended without starting it: then it is
// cancelled, and never starts; or the run's lease has ended and no
// attempt runs: then none starts any more, those not started are
// cancelled) and
// confirm_timeout has passed since the last "w" word, it decides itself to
// switch back, so a configuration that cuts off SSH, or a deployer that
// vanished, is still rolled back, and a verdict that takes its time is
// not. The decision is one link made once (ln -s fails when it exists),
// so the deployer and the watchdog can never both win; once decided, an
// activation that has not started never will (its fate is cancelled). It
// switches back only a host that runs the system its activation
// activated, or still runs the one before when an attempt began and did
// not meet a held switch lock (cut short, it may have done part of its
// work); a host whose every attempt met the lock (exit 11: nothing
// changed) gets its profile pointed back, and no switch; a host that runs anything
// else was switched by someone else since, and is left alone (the profile
// is pointed back if it was left on the new system). The wake FIFO wakes it at once
// for a word ("h"), the activation's end ("a") and a decision ("d"); a
// tick each second for its clock, read from /proc/uptime in hundredths.
func (a Activation) watchdogScript() string {
	return fmt.Sprintf(`d=%[1]s
exec 8>>%[2]s && flock -s 8 || exit 1
[ "$(readlink "$d/act.1.fate")" = started ] || { echo refused > "$d/watchdog"; exit 0; }
rm -f "$d/wake"; mkfifo -m 600 "$d/wake" && exec 7<>"$d/wake" || exit 1
echo waiting > "$d/watchdog"; : > "$d/guarded"
( while sleep %[3]d; do echo t || exit 0; done ) 7>&- 8>&- </dev/null >"$d/wake" 2>/dev/null &
fleet_tick=$!
trap 'kill $fleet_tick 2>/dev/null' EXIT
fleet_now() { IFS='. ' read -r fleet_s fleet_c fleet_x </proc/uptime; fleet_up=$((fleet_s * 100 + 1$fleet_c - 100)); }
fleet_over() {
[ -z "$fleet_done" ] || return 0
[ -f "$d/activated" ] || [ $((fleet_up - fleet_start)) -ge %[4]d ] && { fleet_done=1; return 0; }
fleet_t=; read -r fleet_t fleet_y < %[12]s 2>/dev/null
if [ "$fleet_t" != %[13]s ] || flock -n -s %[15]s true 2>/dev/null; then
for f in "$d"/act.*.fate; do [ -L "$f" ] && ln -s cancelled "$d/unit.$(basename "$f" .fate | cut -d. -f2).fate" 2>/dev/null; done
fleet_r=
for f in "$d"/unit.*.fate; do
[ "$(readlink "$f")" = started ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2)
[ ! -f "$d/activated.$fleet_n" ] || continue
fleet_q=; read -r fleet_q < "$d/unit.$fleet_n.pid" 2>/dev/null
[ -z "$fleet_q" ] || ! kill -0 "$fleet_q" 2>/dev/null || fleet_r=1
done
[ -n "$fleet_r" ] || { fleet_done=1; return 0; }
fi
[ -z "$fleet_running" ] || return 1
if [ ! -L "$d/unit.1.fate" ]; then
fleet_p=; read -r fleet_p < "$d/act.1.pid" 2>/dev/null
[ -z "$fleet_p" ] || kill -0 "$fleet_p" 2>/dev/null || ln -s cancelled "$d/unit.1.fate" 2>/dev/null
[ -L "$d/unit.1.fate" ] || return 1
fi
if [ "$(readlink "$d/unit.1.fate")" = cancelled ]; then fleet_done=1; else fleet_running=1; fi
[ -n "$fleet_done" ]
}
fleet_done= fleet_running=
fleet_now; fleet_start=$fleet_up fleet_word=$fleet_up
until [ -L "$d/decision" ]; do
fleet_now
if fleet_over; then [ $((fleet_up - fleet_word)) -lt %[5]d ] || break; fi
read -r fleet_w <&7 || break
[ "$fleet_w" != h ] || { fleet_now; fleet_word=$fleet_up; }
done
ln -s %[6]s "$d/decision" 2>/dev/null
fleet_began= fleet_locked=
for f in "$d"/act.*.fate; do
[ -L "$f" ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2); fleet_u="$d/unit.$fleet_n.fate"
ln -s cancelled "$fleet_u" 2>/dev/null
fleet_a=; read -r fleet_a < "$d/activated.$fleet_n" 2>/dev/null
if [ "$(readlink "$fleet_u")" = started ]; then if [ "$fleet_a" = %[14]d ]; then fleet_locked=1; else fleet_began=1; fi; fi
done
[ "$(readlink "$d/decision")" = %[7]s ] && { echo confirmed > "$d/watchdog"; exit 0; }
echo rolling-back > "$d/watchdog"
%[11]s
fleet_cur=$(readlink -f /run/current-system)
if [ "$fleet_cur" = %[8]s ] || { [ "$fleet_cur" = %[10]s ] && [ -n "$fleet_began" ]; }; then
nix-env -p %[9]s --set %[10]s && %[10]s/bin/switch-to-configuration test; echo "$?" > "$d/rolledback"
elif [ "$fleet_cur" = %[10]s ] && [ -n "$fleet_locked" ]; then
nix-env -p %[9]s --set %[10]s; echo "$?" > "$d/rolledback"
else
[ "$(readlink -f %[9]s)" != %[8]s ] || nix-env -p %[9]s --set %[10]s
echo "kept $fleet_cur" > "$d/rolledback"
fi
echo done > "$d/watchdog"`,
		shell.Quote(StateDir+"/"+a.Run), GuardFile, int(watchdogTick.Seconds()), centis(a.Timing.watchdogWaitsForActivation()), centis(a.Timing.Confirm),
		DecisionRollback, DecisionConfirm, shell.Quote(a.System), ProfilePath, shell.Quote(a.Previous), a.stopAttempts(), LeaseFile, shell.Quote(a.Run), SwitchLockedExit, LockFile)
}

// stopAttempts is the watchdog's last step before it switches back: every
// attempt of the activation that started and has not ended is stopped
// (its transient unit where systemd runs, and switch-to-configuration
// itself: TERM once, then KILL after ten seconds), and waited for, so that the
// switch back is the last switch of the run: no attempt, a retry after a
// held switch lock or one that outlived activation_timeout, switches the
// host after it. (The decision made, no attempt starts any more.)
func (a Activation) stopAttempts() string {
	stop := ""
	if a.Systemd {
		stop = "[ $fleet_k -ne 0 ] || systemctl stop " + shell.Quote(ActivationUnit(a.Run)+".service") + " 2>/dev/null\n"
	}
	return `for f in "$d"/unit.*.fate; do
[ "$(readlink "$f")" = started ] || continue
fleet_n=$(basename "$f" .fate | cut -d. -f2); fleet_k=0 fleet_x=
while [ ! -f "$d/activated.$fleet_n" ]; do
fleet_p=; read -r fleet_p < "$d/unit.$fleet_n.pid" 2>/dev/null
[ -n "$fleet_p" ] && kill -0 "$fleet_p" 2>/dev/null || break
` + stop + `fleet_s=; read -r fleet_s < "$d/unit.$fleet_n.stc" 2>/dev/null
[ -z "$fleet_s" ] || [ -n "$fleet_x" ] || { kill -TERM "$fleet_s" 2>/dev/null; fleet_x=1; }
[ -z "$fleet_s" ] || [ $fleet_k -ne 50 ] || kill -KILL "$fleet_s" 2>/dev/null
fleet_k=$((fleet_k+1)); sleep 0.2
done
done`
}

// BootScript is run's boot action, attempt attempt: fenced (boot.<attempt>),
// switch-to-configuration boot under timeout(1) (seconds), its output to a
// file on the host (as the activation's: a dropped session cannot end it
// through a broken pipe), its last lines printed, its exit status recorded
// (booted.<attempt>) and, on success, SucceededFile; a record that cannot
// be written fails it (RecordFailed).
func BootScript(run, system string, attempt int, seconds float64) string {
	return Remote(fenceScript + fmt.Sprintf(`fleet_fence %[1]s boot.%[2]d
timeout %[3]s %[4]s/bin/switch-to-configuration boot </dev/null >%[5]s/boot.%[2]d.output 2>&1; rc=$?
tail -n 5 %[5]s/boot.%[2]d.output >&2
{ echo "$rc" > %[5]s/booted.%[2]d && { [ $rc -ne 0 ] || %[6]s; }; } || { echo %[7]s >&2; exit 1; }
exit $rc`, shell.Quote(run), attempt, strconv.FormatFloat(seconds, 'f', -1, 64), shell.Quote(system), shell.Quote(StateDir+"/"+run), MarkScript(system), shell.Quote(RecordFailed)))
}

// RecordFailed is an action's word that the host could not record how it
// went (the activation's or the boot entry's exit status, the system that
// passed its verdict): it may have changed the host, and no later read
// would know.
const RecordFailed = "fleet: the host could not record how its action went under " + StateDir + " (is /run full or read-only?)"
