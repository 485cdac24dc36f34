package deploy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/shell"
)

// The steps of a node's deploy. Each says what it does, and what the host
// is left with when the deploy stops in it; nodeRun.step runs them.

var connectStep = &step{
	name: StepConnect, does: "logging in over SSH", cond: CondReachable,
	run: func(ctx context.Context, nr *nodeRun) error {
		if !inStore(nr.n.System) && !nr.n.buildsThere() {
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
		nr.copy = nr.d.startCopy(ctx, nr.c, nr.n)
		l, err := nr.d.takeLock(ctx, nr.c, nr.begun)
		if err != nil {
			return err
		}
		nr.lock = l
		return nil
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return "nothing was done on the host (the copy of the closure, if it had started, only adds paths to its store)"
	},
}

var readStep = &step{
	name: StepRead, does: "reading what the host runs", cond: CondReachable,
	run: func(ctx context.Context, nr *nodeRun) error {
		lines, err := nr.lock.read(ctx)
		if err != nil {
			return err
		}
		for len(lines) < 4 {
			lines = append(lines, "")
		}
		nr.r.PreviousSystem = strings.TrimSpace(lines[0])
		nr.r.CurrentSystem = nr.r.PreviousSystem
		nr.container, nr.systemd = lines[1] == "container", lines[2] == "systemd"
		nr.r.VerifiedSystem = strings.TrimSpace(lines[3])
		goal := nr.d.Options.Goal
		if (goal == GoalSwitch || goal == GoalTest) && nr.r.PreviousSystem == nr.n.System && nr.r.VerifiedSystem == nr.n.System {
			nr.r.Phase, nr.r.AlreadyCurrent = PhaseSucceeded, true
			nr.r.Message = fmt.Sprintf("the host already runs %s, which passed its verdict there on an earlier deploy: recorded as switched without a new activation", nr.n.System)
			return errFinished
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
		return "nothing was changed on the running system (the copy only adds paths to the host's store); the host runs " + orNone(nr.r.PreviousSystem)
	},
}

var profileStep = &step{
	name: StepProfile, does: "pointing the system profile at the new system", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		if out, err := nr.d.output(nr.c.Command(ctx, remote(profileScript(nr.n.System)))); err != nil {
			exit, msg := exitOf(err, out)
			return fail(exit, "ProfileFailed", "nix-env --set failed: "+msg, "")
		}
		nr.pass(CondActivated, "ProfileSet", "the system profile points at the new system")
		return nil
	},
	leaves: func(nr *nodeRun, during bool) string {
		if !during {
			return "nothing was changed on the running system; the host runs " + orNone(nr.r.PreviousSystem)
		}
		return "the system profile may already point at the new system; the running system and the boot entry are unchanged"
	},
}

var dryActivateStep = &step{
	name: StepDryActivate, does: "running switch-to-configuration dry-activate", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		out, err := nr.d.output(nr.c.Command(ctx, remote(shell.Quote(nr.n.System)+"/bin/switch-to-configuration dry-activate")))
		if err != nil {
			exit, msg := exitOf(err, out)
			return fail(exit, "DryActivationFailed", "dry-activate failed: "+msg, "")
		}
		nr.r.Phase, nr.r.Message = PhaseSucceeded, "dry-activate: "+lastLines(out, 20)
		return nil
	},
	leaves: func(*nodeRun, bool) string {
		return "nothing was changed on the host (a dry activation changes nothing)"
	},
}

var activateStep = &step{
	name: StepActivate, does: "activating the new system with switch-to-configuration test", cond: CondActivated, phase: PhaseActivating,
	run: func(ctx context.Context, nr *nodeRun) error {
		if err := nr.holdsLock(); err != nil {
			return err
		}
		nr.run = runID()
		nr.watch = !nr.d.Options.Keep && nr.r.PreviousSystem != "" && nr.r.PreviousSystem != nr.n.System
		if nr.watch {
			nr.lock.speakFor(nr.run)
		}
		return nr.listening(ctx, StepActivate, nr.activate)
	},
	leaves: (*nodeRun).leavesActivation,
}

// holdsLock fails the node, before anything changes on the host, when the
// host's deploy lock was lost: its session ended (the connection dropped,
// or the host ended the lease of a deployer it had not heard from).
func (nr *nodeRun) holdsLock() error {
	if nr.lock != nil && nr.lock.lost() {
		return fail(1, "DeployLockLost", "the host's deploy lock was lost before the system was changed (its session ended: the connection dropped, or the host heard nothing from this deployer for remote_exec_timeout and ended the lease): nothing was changed on the host",
			"the next apply retries this node")
	}
	return nil
}

// listening runs the work of a step between the activation and the
// decision on it, while the host must keep acknowledging the deployer's
// words. Once it has not for longer than confirm_timeout (and a second,
// the watchdog's tick), no confirmation could reach it in time: whatever
// its activation does, the host switches itself back once it has ended.
// The step then ends with that outcome, instead of waiting for
// connections to time out.
func (nr *nodeRun) listening(ctx context.Context, step StepName, work func(context.Context) error) error {
	if !nr.watch {
		return work(ctx)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := nr.d.confirmTimeout() + time.Second
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if nr.lock.quiet() > limit {
					cancel(errHostSilent)
					return
				}
			}
		}
	}()
	err := work(lctx)
	close(stop)
	<-done
	if err != nil {
		nr.lock.hush()
	}
	if ctx.Err() == nil && errors.Is(context.Cause(lctx), errHostSilent) {
		nr.silent, nr.sshWorks = true, false
		f := fail(1, "HostStoppedAnswering", fmt.Sprintf("the host stopped answering during the %s step: nothing came back from it for longer than confirm_timeout (%s), so no confirmation can reach it in time; "+
			"its watchdog switches it back to %s once the activation has ended, and nothing more is waited for", step, nr.d.confirmTimeout(), orNone(nr.r.PreviousSystem)),
			"the host froze, went down or was cut off from this machine during the deploy: check it; the next refresh reads which system it runs")
		f.rollback = true
		return f
	}
	return err
}

// activate runs switch-to-configuration test, after the system profile
// (not for goal test, which leaves the boot default alone, as nixos-rebuild
// test does) and the host-side watchdog that rolls an unconfirmed
// activation back, all in one round trip.
func (nr *nodeRun) activate(ctx context.Context) error {
	d, prev := nr.d, nr.r.PreviousSystem
	prepare := "mkdir -p " + shell.Quote(stateDir+"/"+nr.run)
	if nr.watch {
		prepare = d.startWatchdog(nr.run, nr.systemd,
			watchdogScript(nr.run, prev, int(d.activationTimeout()/time.Second)+5, int(d.confirmTimeout()/time.Second)))
	}
	// A subshell: the watchdog's start exits it on failure, and the
	// marker then names the step.
	prepare = "(\n" + prepare + "\n) || { echo " + shell.Quote(prepareFailed) + " >&2; exit 1; }; "
	if d.Options.Goal != GoalTest {
		prepare = profileScript(nr.n.System) + prepare
	}
	nr.activation = activationSent
	exit, msg, timedOut := d.activate(ctx, nr.c, nr.run, nr.n.System, nr.systemd, nr.container, prepare)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case exit != 0 && strings.Contains(msg, profileFailed):
		nr.activation = notActivated
		return fail(exit, "ProfileFailed", "nix-env --set failed: "+msg, "")
	case exit != 0 && strings.Contains(msg, prepareFailed) && nr.watch:
		nr.activation = notActivated
		return fail(exit, "WatchdogFailed", "cannot start the rollback watchdog on the host: "+msg, "")
	case exit != 0 && strings.Contains(msg, prepareFailed):
		nr.activation = notActivated
		return fail(exit, "ActivationFailed", "cannot prepare the activation: "+msg, "")
	case timedOut:
		f := fail(1, "ActivationTimedOut", msg, "a unit of the new system does not start; on a container RuntimeMaxSec=180 ends the activation first")
		f.rollback = true
		return f
	}
	nr.activation = activationEnded
	reason := activationReason(exit)
	if exit == -1 {
		// Decided from the host, not from the exit status the drop lost:
		// the activation runs on, and records its exit status there.
		d.note(nr.n.Name, StepActivate, "%s; asking the host how the activation ended", msg)
		if hostExit, said, ok := d.activationExit(ctx, nr.c, nr.run); ok {
			exit, reason = hostExit, activationReason(hostExit)+"AfterSessionDropped"
			msg = fmt.Sprintf("the SSH session dropped during activation; the host recorded exit %d: %s", exit, said)
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	nr.exit = exit
	nr.r.Outcomes[CondActivated] = Outcome{Passed: exit == 0, Reason: reason, Message: msg}
	return nil
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
	out, err := nr.d.output(nr.c.Command(ctx, remote(readCurrentScript)))
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

// verdict observes the activated host and judges what it saw.
func (nr *nodeRun) verdict(ctx context.Context) error {
	{
		obs := nr.d.observe(ctx, nr.c, nr.exit, nr.systemd)
		if ctx.Err() != nil {
			return ctx.Err()
		}
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
	run:    func(ctx context.Context, nr *nodeRun) error { return nr.listening(ctx, StepConfirm, nr.confirm) },
	leaves: (*nodeRun).leavesConfirm,
}

// confirm tells the host's watchdog the verdict passed, and waits for it
// (and the activation) to let go of the host (releasedScript), so that a
// deploy of the host right after this one finds nothing of this one's
// running. Only an answer from the host that its decision is to keep the
// new system counts: a confirmation that was not acknowledged leaves the
// node failed, as the watchdog then switches it back.
func (nr *nodeRun) confirm(ctx context.Context) error {
	mark := ""
	if nr.d.Options.Goal == GoalTest {
		// Goal test ends here: the host's record of a passed deploy.
		mark = markScript(nr.n.System) + "; "
	}
	if !nr.watch {
		if mark != "" {
			if out, err := nr.d.output(nr.c.Command(ctx, remote(mark+"true"))); err != nil {
				_, msg := exitOf(err, out)
				return fail(1, "RecordFailed", "the host's record of this deploy was not written: "+msg, "")
			}
		}
		return nr.confirmed()
	}
	out, err := nr.d.output(nr.c.Command(ctx, remote(decideScript(nr.run, decisionConfirm)+
		"; [ \"$fleet_d\" != "+decisionConfirm+" ] || { "+mark+releasedScript(watchdogLetGo)+"; }")))
	nr.lock.hush()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	decision := strings.TrimSpace(firstLine(out))
	if decision == decisionConfirm && !strings.Contains(out, "released") {
		nr.d.note(nr.n.Name, StepConfirm, "the host took the confirmation, but its watchdog had not ended %s later", watchdogLetGo*time.Second)
	}
	if err != nil && decision == "" {
		// The answer was lost: the host says what it decided.
		decision, _ = nr.d.decision(ctx, nr.c, nr.run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	switch decision {
	case decisionConfirm:
		return nr.confirmed()
	case decisionRollback:
		f := fail(1, "ConfirmTooLate", fmt.Sprintf("the host's watchdog had already decided to switch back to %s: the verdict took longer than confirm_timeout (%s)",
			orNone(nr.r.PreviousSystem), nr.d.confirmTimeout()), "raise verdict.confirm_timeout")
		f.phase = PhaseRolledBack
		nr.r.RolledBack = true
		return f
	}
	_, msg := exitOf(err, out)
	return fail(1, "ConfirmFailed", fmt.Sprintf("the confirmation was not acknowledged by the host (%s): unless it arrived, the host's watchdog switches %s back to %s once confirm_timeout (%s) has passed since this deployer's last word",
		orNone(msg), nr.n.System, orNone(nr.r.PreviousSystem), nr.d.confirmTimeout()), "the next refresh reads which system the host runs")
}

func (nr *nodeRun) confirmed() error {
	if nr.d.Options.Goal == GoalTest {
		nr.r.Phase, nr.r.Message = PhaseSucceeded, "activated and verified (goal test: the boot default is unchanged)"
		nr.r.VerifiedSystem = nr.n.System
	}
	return nil
}

func (nr *nodeRun) leavesConfirm(during bool) string {
	if !during || !nr.watch {
		return nr.unconfirmed()
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	decision, asked := nr.d.decision(ctx, nr.c, nr.run)
	switch {
	case decision == decisionConfirm:
		return fmt.Sprintf("the host took the confirmation: %s stays active, and its boot entry is not made yet (the next apply makes it)", nr.n.System)
	case decision == decisionRollback:
		return fmt.Sprintf("the host's watchdog had already decided to switch back to %s", orNone(nr.r.PreviousSystem))
	case asked:
		return "the confirmation did not reach the host: " + nr.unconfirmed()
	}
	return fmt.Sprintf("whether the confirmation reached the host is not known: if it did not, the host's watchdog switches %s back to %s once confirm_timeout (%s) has passed since this deployer's last word; the next refresh reads which system it runs",
		nr.n.System, orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
}

var finaliseStep = &step{
	name: StepFinalise, does: "making the new system the boot default with switch-to-configuration boot", cond: CondBootloader, phase: PhaseFinalizing,
	run: func(ctx context.Context, nr *nodeRun) error { return nr.finalise(ctx) },
	leaves: func(nr *nodeRun, during bool) string {
		if nr.d.Options.Goal == GoalBoot {
			return "the system profile points at " + nr.n.System + "; the boot entry may still point at the old system (the next apply makes it the boot default)"
		}
		return nr.n.System + " is active and confirmed; the boot entry may still point at the old system (the next apply makes it the boot default)"
	},
}

// finalise makes the system the boot default: switch-to-configuration boot
// under timeout 120, exit 11 retried every interval up to the attempts
// (FR-010); then the host's record of a passed deploy.
func (nr *nodeRun) finalise(ctx context.Context) error {
	d := nr.d
	// A shared hold of the guard: a deployment that took the lock after
	// this node lost it (a dropped session) waits for the boot entry too.
	boot := guardScript + " || exit 1; timeout " + strconv.FormatFloat(d.bootBound().Seconds(), 'f', -1, 64) + " " + shell.Quote(nr.n.System) + "/bin/switch-to-configuration boot; rc=$?; [ $rc -ne 0 ] || " + markScript(nr.n.System) + "; exit $rc"
	for attempt := 1; ; attempt++ {
		out, err := d.output(nr.c.Command(ctx, remote(boot)))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		exit, msg := exitOf(err, out)
		if exit == 0 {
			nr.pass(CondBootloader, "BootDefault", "the boot entry points at the new system")
			nr.r.Phase, nr.r.Message, nr.r.VerifiedSystem = PhaseSucceeded, fmt.Sprintf("switched to %s", nr.n.System), nr.n.System
			if d.Options.Goal == GoalBoot {
				nr.r.Message = fmt.Sprintf("%s is the boot default from the next boot", nr.n.System)
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
		case 255:
			msg += "; the host decides: " + d.hostState(nr.c, nr.n.System)
		}
		return fail(exit, "BootloaderFailed", "switch-to-configuration boot failed: "+msg, hint)
	}
}

var rollbackStep = &step{
	name: StepRollback, does: "switching the host back to its previous system", cond: CondVerdict,
	run: func(ctx context.Context, nr *nodeRun) error {
		nr.lock.hush()
		if nr.silent {
			// What the host does was said: it switches itself back.
			nr.r.Phase, nr.r.RolledBack = PhaseRolledBack, true
			return nil
		}
		nr.d.rollback(ctx, nr.c, nr.run, &nr.r, nr.sshWorks)
		return ctx.Err()
	},
	leaves: func(nr *nodeRun, _ bool) string {
		return fmt.Sprintf("the host's watchdog switches it back to %s: it was asked to, or confirm_timeout (%s) passes after this deployer's last word",
			orNone(nr.r.PreviousSystem), nr.d.confirmTimeout())
	},
}

// watchdogLetGo bounds, in seconds, the wait for a confirmed watchdog to
// end: it ends at once, woken by the decision.
const watchdogLetGo = 10

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
