package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/agreement"
	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// The steps of a node's deploy. Each says what it does, and what the host
// is left with when the deploy stops in it; nodeRun.step runs them.

var connectStep = &step{
	name: StepConnect, does: "logging in over SSH", cond: CondReachable,
	run: func(ctx context.Context, nr *nodeRun) error {
		if !nr.n.KeysOnly && !inStore(nr.n.System) && !nr.n.buildsThere() && !nr.builds.hostRan(nr.n) {
			return fail(1, "SystemMissing", fmt.Sprintf("system %s does not exist on this machine: build it first, or give the node its derivation", nr.n.System), "")
		}
		c, err := nr.d.Transport.Open(ctx, nr.n.Settings)
		if err != nil {
			return fail(1, "InvalidConfiguration", err.Error(), "")
		}
		nr.c = c
		if c.Redirected != "" {
			nr.d.note(nr.n.Name, StepConnect, "ssh_config_file sends %s", c.Redirected)
		}
		if len(c.MaybeFromConfig) > 0 {
			nr.d.note(nr.n.Name, StepConnect, "ssh_config_file sets %s under a Match line, which the deployment does not evaluate: it gives none of them, so the file's (or ssh's default) apply to this node", strings.Join(c.MaybeFromConfig, ", "))
		}
		if exit, msg := nr.d.startMaster(ctx, c); exit != 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if hostKeyRefused(msg) {
				msg, hint, trusted := nr.d.hostKeyMismatch(ctx, c, nr.n.Settings)
				nr.r.HostKeySeen = trusted // the refused key is never recorded
				return fail(exit, "HostKeyMismatch", msg, hint)
			}
			if loginRefused(msg) {
				return fail(exit, "LoginRefused", "the host refused the login: "+msg, sshHint(msg))
			}
			return fail(exit, "ConnectionFailed", "cannot reach the host: "+msg, sshHint(msg))
		}
		nr.r.HostKeySeen = c.SeenKey(ctx)
		nr.pass(CondReachable, "Connected", "logged in over SSH")
		return nil
	},
	leaves: func(*nodeRun, bool) string { return "nothing was done on the host" },
}

var lockStep = &step{
	name: StepLock, does: "taking the host's deploy lock", cond: CondReachable,
	run: func(ctx context.Context, nr *nodeRun) error {
		// The copy only adds paths to the host's store, which is safe
		// whoever holds the lock: it runs while the lock is taken, and is
		// abandoned if the lock is not.
		if !nr.n.KeysOnly {
			nr.copy = nr.d.startCopy(ctx, nr.c, nr.n)
		}
		l, lines, err := nr.d.takeLock(ctx, nr.c, nr.d.Options.LockTimeout, nr.begun)
		if err != nil {
			return err
		}
		nr.lock, nr.read = l, lines
		nr.runs = append(nr.runs, l.Run())
		nr.d.note(nr.n.Name, StepLock, "run %s holds the host's deploy lock (its units on the host: %s, %s)", l.Run(), agreement.ActivationUnit(l.Run()), agreement.WatchdogUnit(l.Run()))
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "nothing was done on the host (the copy of the closure, if it had started, only adds paths to its store)"
	},
}

var readStep = &step{
	name: StepRead, does: "reading what the host runs", cond: CondReachable,
	run: func(ctx context.Context, nr *nodeRun) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lines := nr.read
		for len(lines) < 6 {
			lines = append(lines, "")
		}
		if f := strings.Fields(lines[5]); !nr.r.KeysTouched && nr.d.Options.Goal != GoalDryActivate && len(f) > 0 && f[0] == "keys" &&
			(Current{KeyRecords: f[1:]}).HasKeys(nr.d.Options.Deployment) {
			// The host keeps the deployment's record of keys it wrote
			// there, which the node no longer has: they go now.
			nr.r.KeysTouched, nr.keysStale = true, true
		}
		nr.r.PreviousSystem = strings.TrimSpace(lines[0])
		nr.r.CurrentSystem = nr.r.PreviousSystem
		nr.container, nr.systemd = lines[1] == "container", lines[2] == "systemd"
		nr.r.VerifiedSystem = strings.TrimSpace(lines[3])
		nr.r.BootSystem = strings.TrimSpace(lines[4])
		goal := nr.d.Options.Goal
		switch {
		case nr.n.KeysOnly && !nr.r.KeysTouched:
			// Its keys go, and the host keeps none of the deployment's.
			nr.keysOnly = true
			nr.r.Phase, nr.r.Message = PhaseSucceeded, "the host keeps no key of this deployment"
			return errFinished
		case nr.n.KeysOnly && nr.r.KeysTouched:
			// The system stands (the plan found nothing else to do): the
			// keys alone, whatever the host runs.
			nr.keysOnly = true
			nr.d.note(nr.n.Name, StepRead, "locked; current system %s: putting the node's keys in place, activating nothing", orNone(nr.r.PreviousSystem))
			return nil
		case (goal == GoalSwitch || goal == GoalTest) && nr.r.PreviousSystem == nr.n.System && nr.r.VerifiedSystem == nr.n.System && nr.r.KeysTouched &&
			(goal != GoalSwitch || nr.r.BootSystem == nr.n.System):
			nr.keysOnly, nr.r.AlreadyCurrent = true, true
			nr.d.note(nr.n.Name, StepRead, "locked; the host already runs %s, which passed its verdict there: putting the node's keys in place, activating nothing", nr.n.System)
			return nil
		case goal == GoalSwitch && nr.r.PreviousSystem == nr.n.System && nr.r.VerifiedSystem == nr.n.System && nr.r.BootSystem != nr.n.System:
			// Goal switch finishes with the boot entry: a host that runs
			// the system after a passing verdict (goal test made it so)
			// but boots another gets its boot entry, and nothing else.
			nr.r.BootEntryOnly, nr.bootedBefore = true, nr.r.BootSystem
			nr.d.note(nr.n.Name, StepRead, "locked; the host runs %s, which passed its verdict there, but boots %s: making it the boot entry, without a new activation", nr.n.System, orNone(nr.r.BootSystem))
			return nil
		case (goal == GoalSwitch || goal == GoalTest) && nr.r.PreviousSystem == nr.n.System && nr.r.VerifiedSystem == nr.n.System:
			nr.r.Phase, nr.r.AlreadyCurrent = PhaseSucceeded, true
			nr.r.Message = fmt.Sprintf("the host already runs %s, which passed its verdict there on an earlier deploy: recorded as switched without a new activation", nr.n.System)
			return errFinished
		}
		if nr.builds.hostRan(nr.n) && !inStore(nr.n.System) {
			return fail(1, "SystemMissing", fmt.Sprintf("the host ran %s after a passing verdict when the rollout began, so this machine did not build it; it runs %s now (another deployer changed it since)",
				nr.n.System, orNone(nr.r.PreviousSystem)), "apply again: the next apply builds the system")
		}
		nr.d.note(nr.n.Name, StepRead, "locked; current system %s", orNone(nr.r.PreviousSystem))
		return nil
	},
	leaves: func(*nodeRun, bool) string { return "nothing was changed on the host" },
}

var copyStep = &step{
	name: StepCopy, does: "copying the closure with nix-copy-closure", cond: CondCopied, phase: PhaseCopying,
	run: func(ctx context.Context, nr *nodeRun) error {
		// The next node starts once this copy has ended, or has run for
		// copyHeadStart: copies (nix-copy-closure compresses on this
		// machine) and logins do not all come at once, and a long copy
		// does not hold the rollout back.
		headStart := time.AfterFunc(copyHeadStart, nr.begun)
		err := nr.copy.wait(ctx)
		headStart.Stop()
		nr.begun()
		if err != nil {
			return err
		}
		if nr.n.buildsThere() {
			nr.pass(CondCopied, "DerivationCopied", "the derivation's closure is in the host's store")
			return nil
		}
		nr.pass(CondCopied, "Copied", "the closure is in the host's store")
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "the system the host runs was not changed (the copy only adds paths to the host's store); it runs " + orNone(nr.r.PreviousSystem)
	},
}

var profileStep = &step{
	name: StepProfile, does: "pointing the system profile at the new system", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		nr.entrySet = nr.rebooting
		return nr.setProfile(ctx)
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "the system profile, the boot entry and the system the host runs were not changed; it runs " + orNone(nr.r.PreviousSystem)
		}
		return "the system profile may already point at the new system; the running system and the boot entry are unchanged"
	},
}

var dryActivateStep = &step{
	name: StepDryActivate, does: "running switch-to-configuration dry-activate", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		// What it says (the units it would stop, restart, start) goes to
		// its standard error, as NixOS's does: both streams are its say.
		out, _, err := capture(nr.c.Command(ctx, remote(shell.Quote(nr.n.System)+"/bin/switch-to-configuration dry-activate")), true)
		if err != nil {
			exit, msg := exitOf(err, out)
			return fail(exit, "DryActivationFailed", "dry-activate failed: "+msg, "")
		}
		said := "the dry activation said nothing"
		if s := strings.TrimSpace(lastLines(out, 20)); s != "" {
			said = "the dry activation said: " + s
		}
		nr.r.Phase, nr.r.Message = PhaseSucceeded, "dry-activate: "+said
		return nil
	},
	leaves: func(*nodeRun, bool) string {
		return "nothing was changed on the host (a dry activation changes nothing)"
	},
}

var activateStep = &step{
	name: StepActivate, does: "activating the new system with switch-to-configuration test", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(ctx); err != nil {
			return err
		}
		nr.watch = !nr.d.Options.Keep && nr.r.PreviousSystem != "" && nr.r.PreviousSystem != nr.n.System
		nr.lock.Watch(nr.watch)
		return nr.listening(ctx, StepActivate, nr.activate)
	},
	leaves: (*nodeRun).leavesActivation,
}

// holdsLock fails the node, before anything changes on the host, when its
// lease on the host's deploy lock is known to have ended: its session
// ended (the connection dropped, or the host heard nothing from this
// deployer for remote_exec_timeout and ended the lease). The host fences
// whatever comes later anyway; this only says so before sending it.
func (nr *nodeRun) holdsLock(ctx context.Context) error {
	if nr.lock != nil && nr.lock.Lost() {
		// Why, when the host can say: it rebooted (the run's records are
		// gone with /run).
		actx, cancel := context.WithTimeout(ctx, nr.d.timing().AskFor())
		v, err := agreement.Ask(actx, host{nr.c}, nr.run())
		cancel()
		if err == nil && v.Lost {
			return nr.hostRebooted("the host rebooted before the "+string(nr.stepNow)+" step; ", v)
		}
		// What the host is left with is what the steps before left it
		// with: after a switch and its verdict, the new system stands.
		return fail(1, "LeaseLost", "the host's deploy lock was lost before the "+string(nr.stepNow)+" step (its session ended: the connection dropped, or the host heard nothing from this deployer for remote_exec_timeout and ended the lease): "+nr.left(nr.stepAt, false),
			"the next apply retries this node")
	}
	return nil
}

// left says what a stop before s (during: in it) leaves on the host: the
// step's own account, of the system, and the keys this deploy changed
// so far (written, removed, their units restarted), which change the
// host too.
func (nr *nodeRun) left(s *step, during bool) string {
	l := s.leaves(nr, during)
	// Once a reboot was asked, what was written before may be gone with
	// /run (and is listed again when put back): the step's account and
	// the keys condition say what the host holds, not this list.
	if k := nr.keysSaid(false); len(k) > 0 && !nr.r.RebootTried {
		l += "; so far this deploy changed the host's keys: " + strings.Join(k, "; ")
	}
	return l
}

// run is the name of this node's deploy on the host.
func (nr *nodeRun) run() string { return nr.lock.Run() }

// ask asks the host over new logins what became of this run, until done,
// or the host has not answered for AskFor, or total has passed (see
// agreement.Await), cancelling first the actions named that have not
// started.
func (nr *nodeRun) ask(ctx context.Context, total time.Duration, done func(agreement.View) bool, cancel ...string) (agreement.View, bool) {
	return agreement.Await(ctx, host{nr.c}, nr.run(), nr.d.timing().AskFor(), total, done, cancel...)
}

// setProfile points the system profile at the new system (goal boot),
// fenced by the host.
func (nr *nodeRun) setProfile(ctx context.Context) error {
	out, err := output(nr.c.Command(ctx, agreement.ProfileScript(nr.run(), nr.n.System)))
	nr.r.BootSystem = ""
	if err == nil {
		nr.pass(CondActivated, "ProfileSet", "the system profile points at the new system")
		nr.r.BootSystem = nr.n.System
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	exit, msg := exitOf(err, out)
	if why, ok := fenced(exit, out); ok {
		return leaseLost("to point its system profile at "+nr.n.System, why, "nothing was changed on the host")
	}
	if exit == 255 {
		// The answer was lost: the host says whether it was set.
		v, answered := nr.ask(ctx, nr.d.timing().AskFor(), func(agreement.View) bool { return true }, "profile")
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case !answered:
			return unknown(fmt.Sprintf("the SSH session dropped while the system profile was pointed at %s, and the host could not be asked whether it was (for %s): the running system is unchanged either way", nr.n.System, nr.d.timing().AskFor()))
		case v.Lost:
			return nr.hostRebooted(fmt.Sprintf("the SSH session dropped while the system profile was pointed at %s; ", nr.n.System), v)
		case v.Fate("profile") == agreement.FateCancelled:
			return fail(255, "ConnectionLost", "the SSH session dropped before the system profile was changed (the request is cancelled on the host): nothing was changed on the host", "the next apply retries this node")
		case v.Profile == nr.n.System:
			nr.pass(CondActivated, "ProfileSet", "the system profile points at the new system")
			nr.r.BootSystem = nr.n.System
			return nil
		}
	}
	return fail(exit, "ProfileFailed", "nix-env --set failed: "+msg, "")
}

// unknown is the failure of a node whose outcome this deployer cannot
// know: the record says so, and the next refresh reads the host.
func unknown(message string) *failure {
	f := fail(1, "OutcomeUnknown", message, "the next refresh reads what the host runs and settles this node's record; the next apply retries it unless the host runs its system with its boot entry made")
	f.phase = PhaseUnknown
	return f
}

// listening runs the work of a step between the activation and the
// decision on it, while the host must keep acknowledging the deployer's
// words (on its lock session, or a spare one). Once it has not for
// Timing.HostGivesUp, the work ends. After the activation, no
// confirmation could reach the host in time: the step's outcome is asked
// of the host (hostWentSilent). During it, the host's watchdog has not
// begun to count (it waits for the activation's end), so the silence
// alone decides nothing: the host is asked what became of the run, and
// one that answers with nothing decided is back, and its activation goes
// on (activationWentSilent). Work that ended well stands, whenever the
// silence began.
func (nr *nodeRun) listening(ctx context.Context, step StepName, work func(context.Context) error) error {
	if !nr.watch {
		return work(ctx)
	}
	// heard is when the host was last found back, answering over new
	// logins: its words may take a while to come through again (a spare
	// session logs in), and it has HostGivesUp from then to answer one.
	var heard time.Time
	for {
		since, err := nr.untilSilent(ctx, heard, work)
		switch {
		case since.IsZero():
			return err
		case step != StepActivate:
			return nr.hostWentSilent(ctx, step)
		}
		if work, err = nr.activationWentSilent(ctx, since); work == nil {
			return err
		}
		heard = time.Now()
	}
}

// untilSilent runs work until it ends, or until the host has answered no
// word for HostGivesUp (nor, since heard, an ask): then work's context is
// cancelled, and since says when the host went silent (zero when it did
// not, when work ended well all the same, or when ctx ended).
func (nr *nodeRun) untilSilent(ctx context.Context, heard time.Time, work func(context.Context) error) (since time.Time, err error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := nr.d.timing().HostGivesUp()
	quiet := func() time.Duration {
		if heard.IsZero() {
			return nr.lock.Quiet()
		}
		return min(nr.lock.Quiet(), time.Since(heard))
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var silentSince time.Time // written before done closes, read after
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if q := quiet(); q > limit {
					silentSince = time.Now().Add(-q)
					cancel(errHostSilent)
					return
				}
			}
		}
	}()
	err = work(lctx)
	close(stop)
	<-done
	if err == nil || ctx.Err() != nil || !errors.Is(context.Cause(lctx), errHostSilent) {
		return time.Time{}, err
	}
	return silentSince, err
}

// hostWentSilent records a node whose host answered no word for
// HostGivesUp during step, after the activation: the deployer stops
// naming the run, so that the host's watchdog decides (it switches back:
// no confirmation was sent), and asks the host what it did.
func (nr *nodeRun) hostWentSilent(ctx context.Context, step StepName) error {
	nr.d.note(nr.n.Name, step, "the host answered no word for %s: asking it, over new logins, what its watchdog did", nr.d.timing().HostGivesUp())
	return nr.leftToWatchdog(ctx, step)
}

// leftToWatchdog stops naming the run of a host that went silent during
// step, asks the host what its watchdog did (see settle), and records
// that.
func (nr *nodeRun) leftToWatchdog(ctx context.Context, step StepName) error {
	nr.lock.Watch(false)
	nr.silent = true
	o, err := nr.settle(ctx, false)
	if err != nil {
		return err
	}
	return o.failure("HostStoppedAnswering", nr.stoppedAnswering(step)+"; "+o.text, hostCutOff)
}

// What a node whose host rebooted during its deploy (its records of the
// run went with /run) is failed with.
const (
	reasonHostRebooted = "HostRebooted"
	hintHostRebooted   = "the host rebooted during the deploy (check why: a crash, a watchdog, an operator): the next apply deploys this node again"
)

// lostText says what a host that lost the run's records (agreement.View's
// Lost: it rebooted since the run's lease began) runs now, and records it:
// a new system it no longer runs is not activated.
func (nr *nodeRun) lostText(v agreement.View, run string) string {
	if v.Current != "" {
		nr.r.CurrentSystem = v.Current
	}
	nr.keys.forget(nr.n.Keys, "not read since the host rebooted")
	nr.r.RebootSeen = true
	if !nr.r.RebootTried {
		nr.r.Outcomes[CondRebooted] = Outcome{Reason: reasonHostRebooted, Message: "the host rebooted during the deploy, which did not ask it to"}
	}
	if v.Current != nr.n.System && nr.r.Outcomes[CondActivated].Passed {
		nr.r.Outcomes[CondActivated] = Outcome{Reason: reasonHostRebooted, Message: fmt.Sprintf("the host rebooted and runs %s, not the new system", orNone(v.Current))}
	}
	text := fmt.Sprintf("the host rebooted during the deploy (what it kept of run %s in /run is gone, and no switch of the run outlived the reboot): it runs %s", run, orNone(v.Current))
	if v.Profile != "" && v.Profile != v.Current {
		text += ", and its system profile points at " + v.Profile
	}
	return text
}

// lost is lostText, and, where the reboot left the system profile on the
// new system, which the host no longer runs (it runs the system before),
// marks the profile to be pointed back once the node's steps have ended
// (profileBack): the run's watchdog would have, and the reboot killed it
// (goal switch; goal boot means the profile to point at the new system).
func (nr *nodeRun) lost(v agreement.View) string {
	prev := nr.r.PreviousSystem
	if v.Profile == nr.n.System && prev != "" && v.Current == prev && nr.d.Options.Goal != GoalBoot {
		nr.profileBackTo = prev
		v.Profile = "" // profileBack says where it points
	}
	return nr.lostText(v, nr.run())
}

// profileBack points the system profile back at profileBackTo (see lost),
// under the host's lock taken again as a new run (the run's lease went
// with the reboot), once the node's steps have ended: a step may still
// watch the old lease while it runs. It says so in the node's message.
func (nr *nodeRun) profileBack(ctx context.Context) {
	prev := nr.profileBackTo
	if prev == "" || ctx.Err() != nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, nr.d.timing().AskFor()+15*time.Second)
	defer cancel()
	lines, o, err := nr.retake(actx)
	switch {
	case err == nil && len(o.acted) > 0:
		nr.r.Message += fmt.Sprintf("; its system profile was not pointed back at %s: %s acted on the host since", prev, o.text())
		return
	case err == nil && len(lines) > 4 && strings.TrimSpace(lines[4]) != nr.n.System:
		return // pointed elsewhere since
	case err == nil:
		var out string
		if out, err = output(nr.c.Command(actx, agreement.ProfileBackScript(nr.run(), prev))); err != nil {
			_, msg := exitOf(err, out)
			err = errors.New(msg)
		}
	}
	if err != nil {
		nr.r.Message += fmt.Sprintf("; pointing its system profile back at %s failed (%v): the next apply deploys the node again", prev, err)
		return
	}
	nr.r.Message += "; its system profile was pointed back at " + prev
}

// hostRebooted fails the node whose host lost the run's records, saying
// what it was doing (prefix) and what the host runs.
func (nr *nodeRun) hostRebooted(prefix string, v agreement.View) *failure {
	return fail(1, reasonHostRebooted, prefix+nr.lost(v), hintHostRebooted)
}

// stoppedAnswering says that the host went silent during step, for the
// message of a node given up on.
func (nr *nodeRun) stoppedAnswering(step StepName) string {
	return fmt.Sprintf("the host stopped answering during the %s step: nothing came back from it for longer than confirm_timeout (%s)", step, nr.d.confirmTimeout())
}

// activationWentSilent is what becomes of the activation when its host
// answered no word for HostGivesUp (since since) while the attempt's
// command ran: that command's session is ended. The host's watchdog
// counts confirm_timeout only once the activation has ended, so the run
// may still pass: the deployer keeps naming it (the watchdog keeps
// waiting for whatever words come through) and asks the host, over new
// logins, what became of it, for up to AskFor. It cancels nothing: an
// attempt that has not started may yet, and is waited for.
//
// A host that never answers is left to its watchdog: the deployer stops
// naming the run, and the outcome is not known (asking again would only
// wait as long once more). A host whose watchdog has decided is settled as
// after a silence in any later step. A host that answers with nothing
// decided is back: the attempt's exit status is waited for from the host,
// as after a dropped session, and the work returned carries on with the
// attempts after it, when it met a held switch lock; nil when the
// activation has ended (recorded) or the node has failed (err).
func (nr *nodeRun) activationWentSilent(ctx context.Context, since time.Time) (func(context.Context) error, error) {
	t := nr.d.timing()
	nr.d.note(nr.n.Name, StepActivate, "the host answered no word for %s during the activation, which its watchdog waits for before it counts confirm_timeout: asking it, over new logins, what became of the run", t.HostGivesUp())
	act := fmt.Sprintf("act.%d", nr.attempt)
	v, answered := nr.ask(ctx, t.AskFor(), func(agreement.View) bool { return true })
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case !answered:
		nr.lock.Watch(false)
		nr.silent = true
		o := nr.notAsked(false)
		return nil, o.failure("HostStoppedAnswering", nr.stoppedAnswering(StepActivate)+"; "+o.text, hostCutOff)
	case v.Lost || v.Decision != "" || v.Watchdog == "refused" || v.Fate(act) == agreement.FateCancelled:
		return nil, nr.leftToWatchdog(ctx, StepActivate)
	}
	nr.d.note(nr.n.Name, StepActivate, "the host went silent for %s during the activation and answered again, nothing decided: asking it how attempt %d of the activation ends",
		time.Since(since).Round(100*time.Millisecond), nr.attempt)
	if again, err := nr.endedOnHost(ctx, cutWhileSilent); !again || err != nil {
		return nil, err
	}
	next := nr.attempt + 1
	return func(ctx context.Context) error { return nr.attempts(ctx, next) }, nil
}

const hostCutOff = "the host froze, went down or was cut off from this machine during the deploy: check it"

// failure is the node's failure for o: reason, message and hint, in o's
// phase; an outcome not known says the next refresh settles it; a host
// that rebooted says so (reason and hint).
func (o settled) failure(reason, message, hint string) *failure {
	if o.rebooted {
		reason, hint = reasonHostRebooted, hintHostRebooted
	}
	f := fail(1, reason, message, hint)
	f.phase = o.phase
	if o.phase == PhaseUnknown {
		f.hint = strings.TrimPrefix(hint+"; the next refresh reads which system the host runs and settles this node's record", "; ")
	}
	return f
}

// settled is what became of an activation the deployer no longer speaks
// for, as the host said.
type settled struct {
	phase     Phase
	text      string // what happened, for the node's message
	confirmed bool   // a confirmation reached the host: the new system stays
	rebooted  bool   // the host rebooted since the run's lease began (agreement.Lost)
}

// settle asks the host what its watchdog did with this run's activation,
// until it has ended (see ask), and says so. confirmSent says a
// confirmation was sent, which may have reached the host.
func (nr *nodeRun) settle(ctx context.Context, confirmSent bool) (settled, error) {
	t := nr.d.timing()
	prev, sys := orNone(nr.r.PreviousSystem), nr.n.System
	act := fmt.Sprintf("act.%d", max(nr.attempt, 1))
	v, answered := nr.ask(ctx, t.AskFor()+nr.d.activationTimeout(), func(v agreement.View) bool {
		return v.Settled(act) != agreement.Unsettled
	}, act)
	if ctx.Err() != nil {
		return settled{}, ctx.Err()
	}
	if v.Current != "" {
		nr.r.CurrentSystem = v.Current
	}
	if !answered {
		return nr.notAsked(confirmSent), nil
	}
	switch v.Settled(act) {
	case agreement.Lost:
		return settled{phase: PhaseFailed, rebooted: true, text: nr.lost(v)}, nil
	case agreement.NeverStarted:
		nr.activation = notActivated
		return settled{phase: PhaseFailed, text: "the activation never started on the host (it is cancelled there): nothing was activated; the host runs " + orNone(v.Current)}, nil
	case agreement.Confirmed:
		return settled{phase: PhaseFailed, confirmed: true, text: fmt.Sprintf("the host took this deployer's confirmation: %s stays active", sys)}, nil
	case agreement.SwitchedBack:
		nr.r.RolledBack = true
		text := "rolled back to " + prev + " by its watchdog"
		if v.Current != nr.r.PreviousSystem {
			// Switched again since: by another deployment, which took
			// the host once the watchdog let go of it.
			text += "; the host runs " + orNone(v.Current) + " now"
		}
		return settled{phase: PhaseRolledBack, text: text}, nil
	case agreement.LeftAlone:
		return settled{phase: PhaseFailed, text: fmt.Sprintf("its watchdog found the host running %s, not %s, and switched nothing", orNone(v.Kept()), sys)}, nil
	case agreement.SwitchBackFailed:
		return settled{phase: PhaseFailed, text: fmt.Sprintf("its watchdog's switch back to %s failed (exit %s; the host runs %s)", prev, v.RolledBack, orNone(v.Current))}, nil
	case agreement.Unsettled:
	}
	state := v.Watchdog
	if state == "" {
		state = "not started"
	}
	return settled{phase: PhaseUnknown, text: fmt.Sprintf("its watchdog had not finished when this deployer stopped asking (it was %s; the host runs %s): unless a confirmation reached it, it switches the host back to %s",
		state, orNone(v.Current), prev)}, nil
}

// notAsked is what becomes of an activation whose host could not be
// asked, for AskFor, what its watchdog did. confirmSent says a
// confirmation was sent, which may have reached the host.
func (nr *nodeRun) notAsked(confirmSent bool) settled {
	t := nr.d.timing()
	prev, sys := orNone(nr.r.PreviousSystem), nr.n.System
	if confirmSent {
		return settled{phase: PhaseUnknown, text: fmt.Sprintf("the host could not be asked (for %s) whether the confirmation reached it: if it did, the host keeps %s, with its boot entry not made; if not, the host's watchdog switches it back to %s once confirm_timeout (%s) has passed since this deployer's last word",
			t.AskFor(), sys, prev, nr.d.confirmTimeout())}
	}
	when := "once the activation has ended and confirm_timeout (%s) has passed since this deployer's last word"
	if nr.activation == activationEnded {
		when = "once confirm_timeout (%s) has passed since this deployer's last word"
	}
	return settled{phase: PhaseUnknown, text: fmt.Sprintf("the host could not be asked what its watchdog did (for %s): unless that watchdog fails, it switches the host back to %s "+when,
		t.AskFor(), prev, nr.d.confirmTimeout())}
}

// activate runs switch-to-configuration test, after the system profile
// (not for goal test, which leaves the boot default alone, as nixos-rebuild
// test does) and the host-side watchdog that rolls an unconfirmed
// activation back, all in one round trip, fenced by the host; a held
// switch lock (exit 11) is retried like the boot lock.
func (nr *nodeRun) activate(ctx context.Context) error {
	nr.activation = activationSent
	if nr.d.Options.Goal != GoalTest {
		// The act command points the profile at the new system, and a
		// watchdog that switches back points it back: what the host
		// boots is known again once the boot entry is made.
		nr.r.BootSystem = ""
	}
	return nr.attempts(ctx, 1)
}

// attempts runs the activation's attempts from the one numbered from on
// (a later one follows an attempt that met a held switch lock).
func (nr *nodeRun) attempts(ctx context.Context, from int) error {
	d := nr.d
	a := agreement.Activation{Run: nr.run(), System: nr.n.System, Previous: nr.r.PreviousSystem, SetProfile: d.Options.Goal != GoalTest,
		Watch: nr.watch, Systemd: nr.systemd, Container: nr.container, Timing: d.timing()}
	for nr.attempt = from; ; nr.attempt++ {
		a.Attempt = nr.attempt
		nr.attemptAt = time.Now()
		actx, cancel := context.WithTimeout(ctx, d.activationTimeout())
		out, err := output(nr.c.Command(actx, a.Script()))
		expired := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		exit, msg := exitOf(err, out)
		if why, ok := fenced(exit, out); ok {
			if nr.attempt == 1 {
				nr.activation = notActivated
				return leaseLost("the activation", why, "nothing was changed on the host by this deploy")
			}
			left := "the system profile points at the new system until this run's watchdog points it back"
			if !nr.watch {
				// No watchdog (on_failure = keep): nothing points it back,
				// and a fenced action of this run no longer can.
				left = "the system profile points at the new system, which the host does not run (no watchdog points it back under on_failure = keep; the boot entry was not made): the next apply deploys the node again"
			}
			return leaseLost("the activation's retry", why, left)
		}
		switch {
		case nr.attempt == 1 && exit != 0 && strings.Contains(out, agreement.ProfileFailed):
			nr.activation = notActivated
			return fail(exit, "ProfileFailed", "nix-env --set failed: "+msg, "")
		case nr.attempt == 1 && exit != 0 && strings.Contains(out, agreement.PrepareFailed) && nr.watch:
			nr.activation = notActivated
			return fail(exit, "WatchdogFailed", "cannot start the rollback watchdog on the host: "+msg, "")
		case nr.attempt == 1 && exit != 0 && strings.Contains(out, agreement.PrepareFailed):
			nr.activation = notActivated
			return fail(exit, "ActivationFailed", "cannot prepare the activation: "+msg, "")
		case expired:
			return nr.activationTimedOut()
		}
		if again, err := nr.lockedAgain(ctx, exit, ""); again || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		switch exit {
		case 255:
			// Decided from the host, not from the exit status the drop
			// lost: the activation runs on, and records its exit status
			// there.
			d.note(nr.n.Name, StepActivate, "the SSH session dropped during activation%s; asking the host how the activation ended", said(msg))
			again, err := nr.endedOnHost(ctx, sessionDropped)
			if again {
				continue
			}
			return err
		case 0:
			msg = "switch-to-configuration test succeeded"
		default:
			nr.activationSaid = msg
			msg = fmt.Sprintf("switch-to-configuration test exited %d: %s", exit, msg)
		}
		nr.recordActivation(exit, activationReason(exit), msg)
		return nil
	}
}

// recordActivation records how the activation ended.
func (nr *nodeRun) recordActivation(exit int, reason, msg string) {
	nr.activation = activationEnded
	nr.exit = exit
	nr.r.Outcomes[CondActivated] = Outcome{Passed: exit == 0, Reason: reason, Message: msg}
}

// cutOff is how an attempt of the activation lost its session before it
// said how the activation ended: the host says it instead.
type cutOff struct {
	says   string // what happened, to begin a sentence
	reason string // what the outcome's reason adds
}

var (
	sessionDropped = cutOff{says: "the SSH session dropped", reason: "AfterSessionDropped"}
	// cutWhileSilent: the host answered no word for HostGivesUp, and the
	// deployer ended the session (see activationWentSilent).
	cutWhileSilent = cutOff{says: "the host went silent and the session was ended", reason: "AfterHostWentSilent"}
)

// endedOnHost asks the host how this attempt of the activation ended,
// once its session was cut off (see activationFromHost), and records it;
// again says the attempt met a held switch lock, and the next one
// follows.
func (nr *nodeRun) endedOnHost(ctx context.Context, cut cutOff) (again bool, err error) {
	exit, msg, err := nr.activationFromHost(ctx, cut)
	if err != nil {
		return false, err
	}
	if again, err := nr.lockedAgain(ctx, exit, ", as the host recorded"); again || err != nil {
		return again && err == nil, err
	}
	reason := activationReason(exit)
	if exit >= 0 {
		reason += cut.reason
	}
	nr.recordActivation(exit, reason, msg)
	return false, nil
}

// lockedAgain says whether an attempt of the activation that exited exit
// met the switch lock held with attempts left: then it notes so (how says
// how it knows) and waits the interval before the next, or returns ctx's
// error.
func (nr *nodeRun) lockedAgain(ctx context.Context, exit int, how string) (bool, error) {
	d := nr.d
	if exit != ExitSwitchLocked || nr.attempt >= d.bootLockAttempts() {
		return false, nil
	}
	d.note(nr.n.Name, StepActivate, "switch lock held (exit 11%s); attempt %d of %d", how, nr.attempt, d.bootLockAttempts())
	if !sleep(ctx, d.bootLockInterval()) {
		return false, ctx.Err()
	}
	return true, nil
}

// activationFromHost asks the host, over new logins, how the activation
// of this attempt ended, once its session was cut off (cut says how): it
// runs on in its unit and records its exit status there. An activation
// that never started (the command that starts it ended first) is
// cancelled on the host, so that it never does. Without systemd nothing
// outlived the session: exit -1, and what the host runs decides (the
// verdict).
func (nr *nodeRun) activationFromHost(ctx context.Context, cut cutOff) (int, string, error) {
	act, unit := fmt.Sprintf("act.%d", nr.attempt), fmt.Sprintf("unit.%d", nr.attempt)
	// What is left of activation_timeout, counted from the attempt's
	// start, as for an attempt whose session did not drop.
	total := max(nr.d.activationTimeout()-time.Since(nr.attemptAt), time.Second)
	if !nr.systemd {
		total = min(total, 5*time.Second)
	}
	// The activation never starts once its fate is cancelled: by this
	// deployer, or by the watchdog, which cancels it when the command that
	// was to start it ended first.
	// This attempt's exit status: an earlier attempt's (a held switch
	// lock) says nothing of this one.
	ended := func(v agreement.View) bool { _, ok := v.Attempt(nr.attempt); return ok }
	neverStarts := func(v agreement.View) bool { return !ended(v) && v.Fate(unit) == agreement.FateCancelled }
	v, answered := nr.ask(ctx, total, func(v agreement.View) bool {
		return ended(v) || v.Fate(act) == agreement.FateCancelled || neverStarts(v) ||
			v.Fate(act) == agreement.FateStarted && v.Fate(unit) == agreement.FateNone && !v.Acting[act]
	}, act)
	if answered && !ended(v) && v.Fate(act) == agreement.FateStarted && v.Fate(unit) == agreement.FateNone && !v.Acting[act] {
		// The command ended before it started the activation: cancelled,
		// unless it starts this instant, in which case its end is waited
		// for.
		if cv, err := agreement.Ask(ctx, host{nr.c}, nr.run(), unit); err == nil && neverStarts(cv) {
			v = cv
		} else {
			v, answered = nr.ask(ctx, total, func(v agreement.View) bool { return ended(v) || neverStarts(v) })
		}
	}
	switch {
	case ctx.Err() != nil:
		return -1, "", ctx.Err()
	case !answered:
		f := unknown(fmt.Sprintf("%s during the activation, and the host could not be asked how it went (for %s): %s",
			cut.says, nr.d.timing().AskFor(), nr.unconfirmed()))
		nr.silent = true
		return -1, "", f
	case v.Lost:
		return -1, "", nr.hostRebooted(cut.says+" during the activation; ", v)
	case v.Fate(act) == agreement.FateCancelled:
		nr.activation = notActivated
		return -1, "", fail(255, "ConnectionLost", cut.says+" before the activation reached the host (it is cancelled there): nothing was activated", "the next apply retries this node")
	case neverStarts(v):
		nr.activation = notActivated
		f := fail(255, "ConnectionLost", cut.says+" before the activation started (it is cancelled on the host): nothing was activated", "the next apply retries this node")
		f.rollback = nr.watch // the watchdog points the system profile back
		return -1, "", f
	case ended(v):
		rc, _ := v.Attempt(nr.attempt)
		if why, ok := fenced(rc, v.Output); ok {
			nr.activation = notActivated
			return -1, "", leaseLost("the activation", why, "nothing was activated")
		}
		return rc, fmt.Sprintf("%s during activation; the host recorded exit %d: %s", cut.says, rc, v.Output), nil
	}
	if nr.systemd && v.Fate(unit) == agreement.FateStarted {
		// Its unit runs on past activation_timeout: stopped, as one
		// whose session did not drop.
		return -1, "", nr.activationTimedOut()
	}
	return -1, cut.says + " during activation; the host kept no exit status (no systemd kept the activation alive)", nil
}

// activationTimedOut fails an activation that did not finish within
// activation_timeout: its unit is stopped where systemd runs, and the
// node is rolled back.
func (nr *nodeRun) activationTimedOut() *failure {
	d := nr.d
	msg := fmt.Sprintf("the activation did not finish within activation_timeout (%s)", d.activationTimeout())
	if nr.systemd {
		msg += "; " + d.stopActivation(nr.c, nr.run())
	}
	hint := fmt.Sprintf("a unit of the new system does not start (its journal says why), or the activation needs longer: raise activation_timeout (%s)", d.activationTimeout())
	if nr.container {
		hint += "; on a container RuntimeMaxSec=180 ends the activation first"
	}
	f := fail(1, "ActivationTimedOut", msg, hint)
	f.rollback = true
	return f
}

func (nr *nodeRun) leavesActivation(during bool) string {
	sys, prev := nr.n.System, orNone(nr.r.PreviousSystem)
	switch {
	case !during || nr.activation == notActivated:
		return "nothing was activated; the host runs " + prev
	case nr.watch:
		return fmt.Sprintf("the activation of %s goes on on the host (%s); unconfirmed, it is switched back to %s by the host's watchdog once it has ended and confirm_timeout (%s) has passed since this deployer's last word",
			sys, nr.hostNow(), prev, nr.d.confirmTimeout())
	case nr.d.Options.Keep:
		return fmt.Sprintf("the activation of %s goes on on the host (%s) and stays (on_failure = keep)", sys, nr.hostNow())
	}
	return fmt.Sprintf("the activation of %s goes on on the host (%s); the host had no other system to switch back to", sys, nr.hostNow())
}

// askTimeout bounds what an interrupted node asks the host for its
// record: the deploy must end at once.
const askTimeout = 700 * time.Millisecond

// hostNow says what the host runs, asked over the master.
func (nr *nodeRun) hostNow() string {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	out, err := output(nr.c.Command(ctx, remote(agreement.ReadCurrentScript)))
	if err != nil {
		return "what it runs now could not be read"
	}
	if current := parseCurrent(out); current.System != nr.n.System {
		return "it runs " + orNone(current.System) + " now"
	}
	return "it runs the new system now"
}

var verdictStep = &step{
	name: StepVerdict, does: "judging the new system: a new SSH login, the current system, systemd settled, the verdict's checks", cond: CondVerdict, phase: PhaseVerifying,
	run: func(ctx context.Context, nr *nodeRun) error {
		return nr.listening(ctx, StepVerdict, func(ctx context.Context) error { return nr.verdict(ctx) })
	},
	leaves: func(nr *nodeRun, _ bool) string { return nr.unconfirmed() },
}

// verdict restarts the units of the keys the deploy changed (the new
// system runs: its units then run with them, and the verdict judges them
// so), then observes the activated host and judges what it saw.
func (nr *nodeRun) verdict(ctx context.Context) error {
	if err := nr.restartUnits(ctx, "restart", StepVerdict); err != nil {
		var f *failure
		if !errors.As(err, &f) || f.reason != "RestartFailed" {
			return err
		}
	}
	{
		obs := nr.d.observe(ctx, nr.c, nr.run(), nr.exit, nr.systemd)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		obs.ActivationSaid = nr.activationSaid
		nr.sshWorks = obs.Reconnected
		if obs.CurrentSystem != "" {
			nr.r.CurrentSystem = obs.CurrentSystem
		}
		if nr.exit == -1 && obs.Reconnected && obs.CurrentSystem == nr.n.System {
			// The host kept no exit status (no systemd to outlive the
			// session): what it runs decides.
			nr.r.Outcomes[CondActivated] = Outcome{Passed: true, Reason: "ActivatedSessionDropped",
				Message: "the session dropped during activation; the host runs the new system"}
		}
		v := Decide(nr.n.System, obs, nr.d.Options.Verdict.Rules)
		if !v.Passed {
			f := fail(max(nr.exit, 1), v.Reason, v.Message, v.Hint)
			f.rollback = true
			return f
		}
		nr.pass(CondVerdict, v.Reason, v.Message)
		return nil
	}
}

// unconfirmed says what becomes of an activation the deploy did not
// confirm.
func (nr *nodeRun) unconfirmed() string {
	if nr.watch {
		return fmt.Sprintf("%s is active and unconfirmed: the host's watchdog switches it back to %s once confirm_timeout (%s) has passed since this deployer's last word",
			nr.n.System, orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
	}
	return nr.n.System + " is active and stays so (no watchdog switches it back)"
}

var confirmStep = &step{
	name: StepConfirm, does: "confirming the verdict to the host's watchdog", cond: CondVerdict, phase: PhaseVerifying,
	run:    func(ctx context.Context, nr *nodeRun) error { return nr.confirm(ctx) },
	leaves: (*nodeRun).leavesConfirm,
}

// confirm tells the host's watchdog the verdict passed, over the sessions
// that carry words, and takes the decision the host answers (once the
// confirmed watchdog has let go of the host, so that a deploy of the host
// right after this one finds nothing of this one's running). When the
// answer is lost, the host is asked over new logins; when it cannot be,
// the node's outcome is not known.
func (nr *nodeRun) confirm(ctx context.Context) error {
	if !nr.watch {
		return nr.confirmed(ctx)
	}
	decision, err := nr.lock.Decide(ctx, agreement.DecisionConfirm)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	nr.lock.Watch(false)
	switch {
	case err == nil && decision == agreement.DecisionConfirm:
		return nr.confirmed(ctx)
	case err == nil && decision == agreement.DecisionRollback:
		nr.silent = true
		why := fmt.Sprintf("the host's watchdog had already decided to switch back to %s: the verdict took longer than confirm_timeout (%s)", orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
		o, err := nr.settle(ctx, false)
		if err != nil {
			return err
		}
		return o.failure("ConfirmTooLate", why+"; "+o.text, "raise verdict.confirm_timeout")
	case err == nil:
		err = fmt.Errorf("the host answered %q", decision)
	}
	// The answer was lost: the host says what it decided.
	nr.d.note(nr.n.Name, StepConfirm, "no answer to the confirmation (%s): asking the host, over new logins, what it decided", err)
	nr.silent = true
	o, err := nr.settle(ctx, true)
	switch {
	case err != nil:
		return err
	case o.confirmed:
		nr.silent = false
		return nr.confirmed(ctx)
	}
	reason := "ConfirmUnanswered"
	if o.phase == PhaseRolledBack {
		reason = "ConfirmTooLate"
	}
	return o.failure(reason, "the host did not answer the confirmation: "+o.text, hostCutOff)
}

// confirmed ends goal test, with the host's record of a passed deploy.
func (nr *nodeRun) confirmed(ctx context.Context) error {
	if nr.d.Options.Goal != GoalTest {
		return nil
	}
	if out, err := output(nr.c.Command(ctx, remote(agreement.LoggedMarkScript(nr.run(), nr.n.System)))); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, msg := exitOf(err, out)
		return fail(1, "RecordFailed", "the host's record of this deploy was not written: "+msg, "")
	}
	nr.r.Phase, nr.r.Message = PhaseSucceeded, "activated and verified (goal test: the boot default is unchanged)"
	nr.r.VerifiedSystem = nr.n.System
	return nil
}

func (nr *nodeRun) leavesConfirm(during bool) string {
	if !during || !nr.watch {
		return nr.unconfirmed()
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	v, err := agreement.Ask(ctx, host{nr.c}, nr.run())
	switch {
	case err == nil && v.Lost:
		return nr.lostText(v, nr.run())
	case err == nil && v.Decision == agreement.DecisionConfirm:
		return fmt.Sprintf("the host took the confirmation: %s stays active, and its boot entry is not made yet (the next apply makes it)", nr.n.System)
	case err == nil && v.Decision == agreement.DecisionRollback:
		return fmt.Sprintf("the host's watchdog had already decided to switch back to %s", orNone(nr.r.PreviousSystem))
	case err == nil:
		return "the confirmation did not reach the host: " + nr.unconfirmed()
	}
	return fmt.Sprintf("whether the confirmation reached the host is not known: if it did not, the host's watchdog switches %s back to %s once confirm_timeout (%s) has passed since this deployer's last word; the next refresh reads which system it runs",
		nr.n.System, orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
}

var finaliseStep = &step{
	name: StepFinalise, does: "making the new system the boot default with switch-to-configuration boot", cond: CondBootloader, phase: PhaseFinalizing,
	run: func(ctx context.Context, nr *nodeRun) error { return nr.finalise(ctx) },
	leaves: func(nr *nodeRun, during bool) string {
		if nr.rebooting {
			return fmt.Sprintf("the host runs %s; the system profile points at %s, which no verdict judged, and the boot entry may too: a reboot before the next apply would boot it (the next apply deploys the node again)", orNone(nr.r.PreviousSystem), nr.n.System)
		}
		if nr.d.Options.Goal == GoalBoot {
			return "the system profile points at " + nr.n.System + "; the boot entry may still point at the old system (the next apply makes it the boot default)"
		}
		return nr.n.System + " is active and confirmed; the boot entry may still point at the old system (the next apply makes it the boot default)"
	},
}

// finalise makes the system the boot default: switch-to-configuration boot
// under timeout 120, fenced by the host, exit 11 retried every interval up
// to the attempts (FR-010); then the host's record of a passed deploy.
// When the answer is lost, the host says whether the boot entry was made
// (a request that had not reached it is cancelled there, and tried again
// while the lease holds).
func (nr *nodeRun) finalise(ctx context.Context) error {
	d := nr.d
	kept := nr.n.System + " is active and confirmed"
	if d.Options.Goal == GoalBoot || nr.rebooting {
		kept = "the system profile points at " + nr.n.System
	}
	relocked := false
	for attempt := 1; ; attempt++ {
		if nr.lock.Lost() && !relocked {
			relocked = true
			if err := nr.relock(ctx, kept); err != nil {
				return err
			}
		}
		// Goal boot judged nothing: the host does not record the system
		// as one that passed a verdict there.
		// A system booted into is judged after the reboot (bootVerdictStep).
		nr.bootAttempt = attempt
		out, err := output(nr.c.Command(ctx, agreement.BootScript(nr.run(), nr.n.System, attempt, d.bootBound().Seconds(), d.Options.Goal != GoalBoot && !nr.rebooting)))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		exit, msg := exitOf(err, out)
		if why, ok := fenced(exit, out); ok {
			if !relocked {
				relocked = true
				d.note(nr.n.Name, StepFinalise, "the host refused the boot entry (%s): taking its deploy lock again", why)
				if err := nr.relock(ctx, kept); err != nil {
					return err
				}
				continue
			}
			return leaseLost("the boot entry", why, kept+"; the boot entry still points at the old system (the next apply makes it the boot default)")
		}
		if exit == 255 {
			boot := fmt.Sprintf("boot.%d", attempt)
			d.note(nr.n.Name, StepFinalise, "the SSH session dropped during the boot entry's update%s; asking the host how it ended", said(msg))
			v, answered := nr.ask(ctx, d.timing().AskFor()+d.bootBound(), func(v agreement.View) bool {
				_, booted := v.Booted[attempt]
				return booted || v.Fate(boot) == agreement.FateCancelled
			}, boot)
			rc, booted := v.Booted[attempt]
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case !answered:
				return unknown(fmt.Sprintf("%s; the SSH session dropped while its boot entry was made, and the host could not be asked (for %s) whether it was", kept, d.timing().AskFor()))
			case v.Lost:
				return nr.hostRebooted("the SSH session dropped while the boot entry was made; ", v)
			case booted:
				exit, msg = rc, "the host recorded exit "+fmt.Sprint(rc)+" after the session dropped"
			case v.Fate(boot) == agreement.FateCancelled && !nr.lock.Lost() && attempt < d.bootLockAttempts():
				continue // it never reached the host: again
			case v.Fate(boot) == agreement.FateCancelled:
				return fail(255, "BootloaderFailed", kept+"; the boot entry's update never reached the host (it is cancelled there): the boot entry still points at the old system (the next apply makes it the boot default)", "")
			default:
				return unknown(fmt.Sprintf("%s; the boot entry's update had not ended when this deployer stopped asking", kept))
			}
		}
		if exit == 0 && nr.rebooting {
			nr.pass(CondBootloader, "BootDefault", "the boot entry points at the new system")
			nr.r.BootSystem = nr.n.System
			return nil
		}
		if exit == 0 {
			nr.pass(CondBootloader, "BootDefault", "the boot entry points at the new system")
			nr.r.Phase, nr.r.Message = PhaseSucceeded, fmt.Sprintf("switched to %s", nr.n.System)
			nr.r.BootSystem = nr.n.System
			switch {
			case d.Options.Goal == GoalBoot:
				nr.r.Message = fmt.Sprintf("%s is the boot default from the next boot", nr.n.System)
			case nr.r.BootEntryOnly:
				nr.r.Message = fmt.Sprintf("the host already ran %s, which passed its verdict there on an earlier deploy, but booted %s: %s is its boot entry now, without a new activation", nr.n.System, nr.bootedBefore, nr.n.System)
				nr.r.VerifiedSystem = nr.n.System
			default:
				nr.r.VerifiedSystem = nr.n.System
			}
			return nil
		}
		if exit == ExitSwitchLocked && attempt < d.bootLockAttempts() {
			d.note(nr.n.Name, StepFinalise, "switch lock held (exit 11); attempt %d of %d", attempt, d.bootLockAttempts())
			if !sleep(ctx, d.bootLockInterval()) {
				return ctx.Err()
			}
			continue
		}
		hint := ""
		if nr.container {
			hint = "the host is a container, which has no bootloader to install: deploy it with goal = \"test\""
		}
		switch exit {
		case ExitSwitchLocked:
			msg = fmt.Sprintf("the switch lock was held for all %d attempts, %s apart", d.bootLockAttempts(), d.bootLockInterval())
			hint = "another switch is running on the host"
		case exitTimedOut:
			msg = fmt.Sprintf("it did not finish within %s: %s", d.bootBound(), msg)
		}
		return fail(exit, "BootloaderFailed", "switch-to-configuration boot failed: "+msg, hint)
	}
}

// relock takes the host's deploy lock again, as a new run, for a node
// whose lease ended after its activation was confirmed, so that its boot
// entry is made under a lease: only while the host still runs the new
// system (nobody switched it since). kept says what the host keeps, for
// the message of a failure.
func (nr *nodeRun) relock(ctx context.Context, kept string) error {
	old := nr.run()
	// The old lease lets go first (a spare session says so to the host);
	// else the host ends it once its lock session has been silent for
	// remote_exec_timeout, which the take waits for at least.
	nr.lock.Release()
	l, lines, err := nr.d.takeLock(ctx, nr.c, max(nr.d.Options.LockTimeout, nr.d.Transport.remoteExecTimeout()+5*time.Second), nil)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f := leaseLost("the boot entry", "this deployer's lease on its deploy lock had ended, and taking it again failed: "+err.Error(),
			kept+"; the boot entry still points at the old system (the next apply makes it the boot default)")
		var taken *failure
		if errors.As(err, &taken) && taken.hint != "" {
			f.hint = taken.hint
		}
		return f
	}
	current := ""
	if len(lines) > 0 {
		current = strings.TrimSpace(lines[0])
	}
	if nr.d.Options.Goal != GoalBoot && !nr.rebooting && current != nr.n.System {
		l.Release()
		nr.r.CurrentSystem = current
		return leaseLost("the boot entry", fmt.Sprintf("this deployer's lease on its deploy lock had ended, and the host runs %s now, not %s: something switched it since", orNone(current), nr.n.System),
			"the boot entry was not made")
	}
	if nr.rebooting && current != nr.r.PreviousSystem {
		l.Release()
		nr.r.CurrentSystem = current
		return leaseLost("the boot entry", fmt.Sprintf("this deployer's lease on its deploy lock had ended, and the host runs %s now, not %s: something switched it since", orNone(current), orNone(nr.r.PreviousSystem)),
			"the boot entry was not made")
	}
	nr.lock = l
	nr.runs = append(nr.runs, l.Run())
	nr.d.note(nr.n.Name, StepFinalise, "the lease of run %s had ended; run %s holds the host's deploy lock now, to make the boot entry", old, l.Run())
	return nil
}

var rollbackStep = &step{
	name: StepRollback, does: "switching the host back to its previous system", cond: CondVerdict,
	run: func(ctx context.Context, nr *nodeRun) error {
		nr.lock.Watch(false)
		if nr.silent {
			return nil // the host was asked already what its watchdog did
		}
		// Asked over the sessions that carry words; the answer may be
		// lost, and the host says what it did either way.
		_, _ = nr.lock.Decide(ctx, agreement.DecisionRollback)
		o, err := nr.settle(ctx, false)
		if err != nil {
			return err
		}
		nr.r.Phase = o.phase
		if o.rebooted {
			// The reboot first: it is why the verdict failed.
			nr.r.Message = o.text + "; the verdict had found: " + nr.r.Message
		} else {
			nr.r.Message += "; " + o.text
		}
		if o.phase == PhaseUnknown || o.rebooted {
			nr.r.Hint = o.failure("", "", nr.r.Hint).hint
		}
		if v := nr.r.Outcomes[CondVerdict]; o.rebooted && !v.Passed {
			// The verdict failed as the host went away: it rebooted.
			v.Reason = reasonHostRebooted
			nr.r.Outcomes[CondVerdict] = v
		}
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return fmt.Sprintf("the host's watchdog switches it back to %s: it was asked to, or confirm_timeout (%s) passes after this deployer's last word",
			orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
	},
}

// copyHeadStart bounds how long the next node of a rollout waits for
// this node's copy before it starts.
const copyHeadStart = 500 * time.Millisecond

// bootTimeout bounds switch-to-configuration boot (FR-010); timeout(1)
// exits 124 when it runs out.
const (
	bootTimeout  = 120 * time.Second
	exitTimedOut = 124
)

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// said is what ssh said, as " (...)" after a sentence; nothing when it
// said nothing.
func said(msg string) string {
	if strings.TrimSpace(msg) == "" {
		return ""
	}
	return " (" + msg + ")"
}
