package agreement

import (
	"embed"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// The host's half: the scripts it runs, and where it keeps its state (see
// the package documentation).

// The host's files.
const (
	LockFile   = "/run/fleet-deploy.lock"
	HolderFile = "/run/fleet-deploy.holder"
	GuardFile  = "/run/fleet-deploy.guard"
	LeaseFile  = "/run/fleet-deploy.lease"
	WordsFile  = "/run/fleet-deploy.words"
	StateDir   = "/run/fleet-deploy"
	// RecordDir holds what a host records of the deploys that finished
	// there, which a reboot must not forget (/run is emptied at a boot;
	// /nix is the host's own, as its store and profiles are).
	RecordDir     = "/nix/var/fleet-deploy"
	SucceededFile = RecordDir + "/succeeded"
	// BootDefaultFile holds the last system a run made the host's boot
	// default (switch-to-configuration boot succeeded: goal switch or
	// boot); SucceededFile only a system that passed its verdict.
	BootDefaultFile = RecordDir + "/boot-default"
	// oldSucceededFile and oldBootDefaultFile are where hosts deployed
	// before RecordDir kept them (until their next reboot): read when
	// the new ones are missing.
	oldSucceededFile   = StateDir + "/succeeded"
	oldBootDefaultFile = StateDir + "/boot-default"
	// ProfilePath is the system profile switched to each new system.
	ProfilePath = "/nix/var/nix/profiles/system"
)

// pathFallback lets a remote command find nix-env, systemd-run and friends
// on a host whose login shell lacks the deployer's PATH.
const pathFallback = `PATH="$PATH:/run/current-system/sw/bin:/nix/var/nix/profiles/system/sw/bin:/run/wrappers/bin"; export PATH; `

// logFn defines fleet_log DIR WORDS..., which the host's scripts call for
// what they hear, decide and do: one line in the run's own log (DIR/log,
// LogName), written when it happens, "<uptime> <words>": the host's
// uptime in seconds (two decimals, from /proc/uptime: one clock for
// every line, whichever process wrote it), then what happened. Only the
// shell's builtins (words come every second or more often); a line that
// cannot be written is lost, never the action (a run the host has no
// directory of writes nothing). The log is for an operator reading what
// the host made of a deploy, and for the tests, which judge the host from
// it alone (HostLog).
const logFn = `fleet_log() { fleet_ld=$1; shift; fleet_lu=; read -r fleet_lu fleet_lx 2>/dev/null </proc/uptime; printf '%s %s\n' "$fleet_lu" "$*" 2>/dev/null >>"$fleet_ld/` + LogName + `"; return 0; }`

// LogName is the name of a run's log in its directory (StateDir/<run>/).
const LogName = "log"

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

// readKeyRecords prints "keys" and the name of each deployment's record
// of the keys it wrote on the host (KeyRecord) that holds a path, with the
// shell's builtins only.
const readKeyRecords = `printf keys; for fleet_f in ` + KeyRecordDir + `/*; do [ -s "$fleet_f" ] || continue; case $fleet_f in *.restart|*.new) continue ;; esac; printf ' %s' "${fleet_f##*/}"; done; echo`

// readScript prints the current system, whether the host is a container,
// whether systemd runs, the last system a run finished with a passing
// verdict, the system the host boots next (readBoots), and the
// deployments whose record of keys the host keeps (readKeyRecords), a
// line each.
const readScript = `readlink -e /run/current-system || echo
if systemd-detect-virt --container >/dev/null 2>&1; then echo container; else echo bare; fi
if [ -d /run/systemd/system ]; then echo systemd; else echo nosystemd; fi
` + readSucceeded + `
` + readBoots + `
` + readKeyRecords

// readBoots prints the system the host boots next, or an empty line when
// it has no system profile: the profile's, from which NixOS's
// switch-to-configuration boot installs the default boot entry (a deploy
// of goal switch or boot points it at the new system; goal test leaves
// it; a watchdog switching back points it back; nixos-rebuild boot or
// switch by hand moves it).
const readBoots = `readlink -e ` + ProfilePath + ` || echo`

// readSucceeded prints SucceededFile's line, or an empty line, with the
// shell's builtins only: the scripts that read a host run on every node of
// every plan, and each process they start costs.
const readSucceeded = `fleet_ok=; read -r fleet_ok 2>/dev/null <` + SucceededFile + ` || read -r fleet_ok 2>/dev/null <` + oldSucceededFile + `; printf '%s\n' "$fleet_ok"`

// ReadCurrentScript prints the current system (a refresh, drift), then
// the last system a run finished there with a passing verdict, the last
// it made the boot default, whether the host is settling a run on its
// own ("settling": a watchdog waits for its decision or switches back, as
// after an interrupted deploy, so that what it runs may change any
// moment; else "idle"), the system it boots next (readBoots), and
// "keys" followed by the name of each deployment's record of the keys it
// wrote there (KeyRecord: only those that hold a path). Builtins only, but for one flock where a
// watchdog's state says it has not finished (a live one holds the guard;
// a killed one's state stays behind).
const ReadCurrentScript = `readlink -e /run/current-system || echo
` + readSucceeded + `
fleet_ok=; read -r fleet_ok 2>/dev/null <` + BootDefaultFile + ` || read -r fleet_ok 2>/dev/null <` + oldBootDefaultFile + `; printf '%s\n' "$fleet_ok"
fleet_s=idle
for fleet_f in ` + StateDir + `/*/watchdog; do
fleet_w=; read -r fleet_w 2>/dev/null <"$fleet_f"
case $fleet_w in waiting|rolling-back) fleet_s=maybe ;; esac
done
[ "$fleet_s" = idle ] || { flock -n -x ` + GuardFile + ` true 2>/dev/null && fleet_s=idle || fleet_s=settling; }
echo "$fleet_s"
` + readBoots + `
` + readKeyRecords

// MarkScript records on the host that system was deployed with a passing
// verdict (SucceededFile).
func MarkScript(system string) string {
	return "{ { [ -d " + shell.Quote(RecordDir) + " ] || mkdir -p " + shell.Quote(RecordDir) + "; } && printf '%s\\n' " + shell.Quote(system) + " > " + SucceededFile + "; }"
}

// logCall is the command that says words (each quoted) in run's log; the
// script defines fleet_log first (logFn).
func logCall(run string, words ...string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shell.Quote(w)
	}
	return "fleet_log " + shell.Quote(StateDir+"/"+run) + " " + strings.Join(quoted, " ")
}

// LoggedMarkScript is goal test's record of a passed deploy (MarkScript),
// said in run's log once it is written ("recorded succeeded <system>").
func LoggedMarkScript(run, system string) string {
	return logFn + "\n" + MarkScript(system) + " && " + logCall(run, "recorded", "succeeded", system) + "\n"
}

// FencedMarkScript is run's mark action: fenced, it records on the host
// that system passed its verdict (MarkScript), as a boot verdict does
// under the lease it took once the host was back; a record that cannot be
// written fails it (RecordFailed).
func FencedMarkScript(run, system string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " mark\n" + MarkScript(system) + " || { echo " + shell.Quote(RecordFailed) + " >&2; exit 1; }\n" +
		logCall(run, "recorded", "succeeded", system) + "\n")
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
	return Remote(render(takeTmpl, struct {
		hostNames
		Run, Holder, GuardHolder string
		WaitSeconds              int
		KeptRuns, FirstPruned    int
		Read, ReadEnd            string
		LeaseCheck               string
		LeaseMisses              int
		Words                    string
	}{
		hostNames:   theHost,
		Run:         run,
		Holder:      holder,
		GuardHolder: guardHolder,
		WaitSeconds: waitSeconds,
		KeptRuns:    keptRuns,
		FirstPruned: keptRuns + 1,
		Read:        readScript,
		ReadEnd:     readEnd,
		LeaseCheck:  strconv.FormatFloat(t.leaseCheck().Seconds(), 'f', -1, 64),
		LeaseMisses: leaseMisses,
		Words:       wordLoop(true),
	}))
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
	return render(wordsTmpl, struct {
		hostNames
		Keeps         bool
		WatchdogLetGo string
	}{hostNames: theHost, Keeps: keeps, WatchdogLetGo: watchdogLetGoText})
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
//
// It ends with a newline: the fenced script follows, from its first line
// "fleet_fence RUN ACTION".
var fenceScript = render(fenceTmpl, theHost) + "\n"

// Markers a remote script prints on standard error to say which of its
// steps failed.
const (
	ProfileFailed = "fleet: nix-env --set failed"
	PrepareFailed = "fleet: the activation could not be prepared"
)

// profileScript points the system profile at system (a new generation).
func profileScript(system string) string {
	return "nix-env -p " + ProfilePath + " --set " + shell.Quote(system) + " || { echo " + shell.Quote(ProfileFailed) + " >&2; exit 1; }; fleet_log \"$fleet_run_dir\" profile " + shell.Quote(system) + "; "
}

// ProfileScript is run's profile action (goal boot): fenced, it points the
// system profile at system.
func ProfileScript(run, system string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " profile\n" + profileScript(system))
}

// ProfileBackScript is run's profile-back action: fenced, it points the
// system profile back at system (the one before), as a deploy that made
// the boot entry for a new system it then gave up on does, in a run whose
// profile action may have ran already.
func ProfileBackScript(run, system string) string {
	return Remote(fenceScript + "fleet_fence " + shell.Quote(run) + " profile-back\n" + profileScript(system))
}

// SinceScript prints, for each action of a run other than mine that
// changes what the host runs or boots (act.N, unit.N, boot.N, profile,
// profile-back, reboot, mark) and whose fate was claimed after the run
// directory of ref last changed (every such action when the host has no
// directory of ref: it rebooted since), "other RUN ACTION"; then "booted
// SYSTEM", what /run/booted-system points at. A deployer whose lease
// ended (ref's: a reboot ends it) asks it once it holds a lease again,
// before it undoes anything: another run's switch meanwhile is left as it
// is.
func SinceScript(ref string, mine []string) string {
	var b strings.Builder
	b.WriteString("fleet_ref=" + shell.Quote(StateDir+"/"+ref) + "\n")
	b.WriteString("for f in " + StateDir + "/*/*.fate; do\n")
	b.WriteString("[ \"$(readlink \"$f\" 2>/dev/null)\" = started ] || continue\n")
	b.WriteString("r=${f%/*}; r=${r##*/}; a=${f##*/}; a=${a%.fate}\n")
	if len(mine) > 0 {
		quoted := make([]string, len(mine))
		for i, m := range mine {
			quoted[i] = shell.Quote(m)
		}
		b.WriteString("case $r in " + strings.Join(quoted, "|") + ") continue ;; esac\n")
	}
	b.WriteString("case $a in act.*|unit.*|boot.*|profile|profile-back|reboot|mark) ;; *) continue ;; esac\n")
	b.WriteString("if [ -d \"$fleet_ref\" ]; then [ -n \"$(find \"$f\" -prune -newer \"$fleet_ref\" 2>/dev/null)\" ] || continue; fi\n")
	b.WriteString("echo \"other $r $a\"\ndone\necho \"booted $(readlink -e /run/booted-system)\"\n")
	return Remote(b.String())
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
	profile, watchdog := "", ""
	if a.Attempt == 1 {
		if a.SetProfile {
			profile = profileScript(a.System)
		}
		if a.Watch {
			watchdog = a.startWatchdog()
		}
	}
	return Remote(fenceScript + render(actTmpl, struct {
		Run, Dir, Unit         string
		Attempt                int
		Profile, StartWatchdog string
		PrepareFailed          string
		Systemd, Container     bool
		UnitScript             string
	}{
		Run:           a.Run,
		Dir:           a.dir(),
		Unit:          ActivationUnit(a.Run),
		Attempt:       a.Attempt,
		Profile:       profile,
		StartWatchdog: watchdog,
		PrepareFailed: PrepareFailed,
		Systemd:       a.Systemd,
		Container:     a.Container,
		UnitScript:    a.unitScript(),
	}))
}

// dir is the run's directory on the host.
func (a Activation) dir() string { return StateDir + "/" + a.Run }

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
	return strings.ReplaceAll(render(unitTmpl, struct {
		hostNames
		Run, Dir, System, RecordFailed string
		Attempt                        int
	}{
		hostNames:    theHost,
		Run:          a.Run,
		Dir:          a.dir(),
		System:       a.System,
		RecordFailed: RecordFailed,
		Attempt:      a.Attempt,
	}), "\n", "; ")
}

// startWatchdog runs the watchdog in the background, as a transient unit
// where systemd runs, so that it survives the session, and waits up to
// ten seconds for it to hold the guard (it touches "guarded" then). Its
// script is a file of the run's directory (watchdog.sh), run by sh: given
// to systemd-run on its command line, its lines would be written into the
// transient unit's file and read as the file's.
func (a Activation) startWatchdog() string {
	return render(startWatchdogTmpl, struct {
		Dir, File, Script, Unit string
		Systemd                 bool
	}{
		Dir:     a.dir(),
		File:    a.dir() + "/watchdog.sh",
		Script:  pathFallback + a.watchdogScript(),
		Unit:    WatchdogUnit(a.Run),
		Systemd: a.Systemd,
	})
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
	return render(watchdogTmpl, struct {
		hostNames
		Run, Dir, System, Previous  string
		Tick                        int
		WaitsForActivation, Confirm int
		StopAttempts                string
	}{
		hostNames:          theHost,
		Run:                a.Run,
		Dir:                a.dir(),
		System:             a.System,
		Previous:           a.Previous,
		Tick:               int(watchdogTick.Seconds()),
		WaitsForActivation: centis(a.Timing.watchdogWaitsForActivation()),
		Confirm:            centis(a.Timing.Confirm),
		StopAttempts:       a.stopAttempts(),
	})
}

// stopAttempts is the watchdog's last step before it switches back: every
// attempt of the activation that started and has not ended is stopped
// (its transient unit where systemd runs, and switch-to-configuration
// itself: TERM once, then KILL after ten seconds), and waited for, so that the
// switch back is the last switch of the run: no attempt, a retry after a
// held switch lock or one that outlived activation_timeout, switches the
// host after it. (The decision made, no attempt starts any more.)
func (a Activation) stopAttempts() string {
	return render(stopAttemptsTmpl, struct {
		Unit    string
		Systemd bool
	}{Unit: ActivationUnit(a.Run) + ".service", Systemd: a.Systemd})
}

// BootScript is run's boot action, attempt attempt: fenced (boot.<attempt>),
// switch-to-configuration boot under timeout(1) (seconds), its output to a
// file on the host (as the activation's: a dropped session cannot end it
// through a broken pipe), its last lines printed, its exit status recorded
// (booted.<attempt>) and, on success, BootDefaultFile and, when verified
// (a verdict passed: goal switch; goal boot judges nothing),
// SucceededFile; a record that cannot be written fails it (RecordFailed).
func BootScript(run, system string, attempt int, seconds float64, verified bool) string {
	// One command list in braces: the script runs it only after a boot
	// entry that succeeded ("[ $rc -ne 0 ] || <mark>").
	mark := "{ [ -d " + shell.Quote(RecordDir) + " ] || mkdir -p " + shell.Quote(RecordDir) + "; } && printf '%s\\n' " + shell.Quote(system) + " > " + BootDefaultFile + " && " + logCall(run, "recorded", "boot-default", system)
	if verified {
		mark += " && " + MarkScript(system) + " && " + logCall(run, "recorded", "succeeded", system)
	}
	mark = "{ " + mark + "; }"
	return Remote(fenceScript + render(bootTmpl, struct {
		Run, Dir, System, Seconds, Mark, RecordFailed string
		Attempt                                       int
	}{
		Run:          run,
		Dir:          StateDir + "/" + run,
		System:       system,
		Seconds:      strconv.FormatFloat(seconds, 'f', -1, 64),
		Mark:         mark,
		RecordFailed: RecordFailed,
		Attempt:      attempt,
	}))
}

// RecordFailed is an action's word that the host could not record how it
// went (the activation's or the boot entry's exit status, the system that
// passed its verdict): it may have changed the host, and no later read
// would know.
const RecordFailed = "fleet: the host could not record how its action went under " + StateDir + " (is /run full or read-only?)"

// The scripts' text is in scripts/, a file each, with comments on what
// each part does: a template (text/template) whose fields are named for
// what they are. A value that may need quoting goes through q
// (shell.Quote); the package's own constants (the host's files, the
// markers, the exit statuses) need none and go in as they are, as does
// the text of another script (a fragment: the word loop, the watchdog's
// last step).
//
//go:embed scripts/*.sh
var scriptFiles embed.FS

// The templates, parsed once.
var (
	takeTmpl          = loadScript("take.sh")
	wordsTmpl         = loadScript("words.sh")
	fenceTmpl         = loadScript("fence.sh")
	actTmpl           = loadScript("act.sh")
	startWatchdogTmpl = loadScript("start_watchdog.sh")
	unitTmpl          = loadScript("unit.sh")
	watchdogTmpl      = loadScript("watchdog.sh")
	stopAttemptsTmpl  = loadScript("stop_attempts.sh")
	bootTmpl          = loadScript("boot.sh")
	askTmpl           = loadScript("ask.sh")
	keysTmpl          = loadScript("keys.sh")
	keyPathTmpl       = loadScript("keypath.sh")
)

// loadScript parses scripts/name. Every line whose first non-blank
// character is "#" (the comments, the shebang) and every blank line is
// dropped first, so that the comments cost the host nothing: it is sent
// the script's other lines alone, joined by newlines, with no newline
// after the last.
func loadScript(name string) *template.Template {
	src, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	var lines []string
	for _, line := range strings.Split(string(src), "\n") {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		lines = append(lines, line)
	}
	return template.Must(template.New(name).Option("missingkey=error").Funcs(template.FuncMap{"q": shell.Quote, "logfn": func() string { return logFn }}).Parse(strings.Join(lines, "\n")))
}

// render runs t on data. The scripts' data are the package's own: an
// error is a bug (a field misnamed or missing), which the tests, rendering
// every script, find.
func render(t *template.Template, data any) string {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		panic(fmt.Sprintf("agreement: the host script %s: %v", t.Name(), err))
	}
	return b.String()
}

// hostNames are the names the host's scripts share (theHost): its files,
// the decisions, the exit statuses and the fence's marker. The scripts'
// data embed them.
type hostNames struct {
	LockFile, HolderFile, GuardFile, LeaseFile, WordsFile string
	StateDir, SucceededFile, ProfilePath                  string
	DecisionConfirm, DecisionRollback                     string
	FencedMarker                                          string
	FencedExit, SwitchLockedExit                          int
}

var theHost = hostNames{
	LockFile:         LockFile,
	HolderFile:       HolderFile,
	GuardFile:        GuardFile,
	LeaseFile:        LeaseFile,
	WordsFile:        WordsFile,
	StateDir:         StateDir,
	SucceededFile:    SucceededFile,
	ProfilePath:      ProfilePath,
	DecisionConfirm:  DecisionConfirm,
	DecisionRollback: DecisionRollback,
	FencedMarker:     FencedMarker,
	FencedExit:       FencedExit,
	SwitchLockedExit: SwitchLockedExit,
}
